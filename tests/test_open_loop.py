"""The open-loop model (runners/metrics/open_loop.py): a FIFO queue in front of the slots predicts a draw's
tokens in its load window, and the `queue` method corrects the host draws' mean by the measured ratio."""
from __future__ import annotations

import pytest

from runners.engines.scheduler import Arrivals, Request
from runners.metrics.interval import HOST_BASE
from runners.metrics.open_loop import SlotModel, host_draws, open_loop_draw, open_loop_interval, tokens_between
from runners.spec import SweepSpec
from runners.workload import workload


def test_tokens_between_counts_the_tokens_made_after_the_start_and_up_to_the_end() -> None:
    assert tokens_between(2.0, 5, 1.0, 2.0, 20.0) == 4  # tokens at 2…6: the one at the start is not after it
    assert tokens_between(12.0, 5, 1.0, 2.0, 20.0) == 5  # 12…16, all inside
    assert tokens_between(22.0, 5, 1.0, 2.0, 20.0) == 0  # starts after the window
    assert tokens_between(0.5, 10, 2.0, 3.0, 9.0) == 3  # 4.5, 6.5 and 8.5 of 0.5, 2.5, …, 18.5
    assert tokens_between(5.0, 3, 0.0, 2.0, 20.0) == 3  # no gap: every token at the first
    assert tokens_between(1.0, 3, 0.0, 2.0, 20.0) == 0


def test_a_request_waits_for_the_first_slot_to_free_and_frees_it_with_its_last_token() -> None:
    one = SlotModel(slots=1, prefill_ms=2.0, itl_ms=1.0)
    # r0 arrives at 0: first token 2, last 2 + 9 = 11. r1 (at 1) gets the slot at 11: first 13, last 22.
    # r2 (at 10) gets it at 22: first 24. Given out of arrival order, answered in the order given.
    assert one.first_tokens_ms([10.0, 0.0, 1.0], [2, 10, 10]) == [24.0, 2.0, 13.0]
    # window (2, 10]: r0's tokens at 3…10, 8 of them in 8 ms
    assert one.tokens_per_s([0.0, 1.0, 10.0], [10, 10, 2]) == pytest.approx(1000.0)
    two = SlotModel(slots=2, prefill_ms=2.0, itl_ms=1.0)
    # r1 starts at once (first token 3), r2 takes r0's slot at 11: window (2, 10] holds 8 + 8 tokens
    assert two.first_tokens_ms([0.0, 1.0, 10.0], [10, 10, 2]) == [2.0, 3.0, 13.0]
    assert two.tokens_per_s([0.0, 1.0, 10.0], [10, 10, 2]) == pytest.approx(2000.0)
    # both in before the first token: no window, so every token over the wall. r0 makes 2, 3, 4; r1 gets the slot
    # at 4 and makes 6, 7, 8: 6 tokens in 8 ms
    assert one.tokens_per_s([0.0, 0.0], [3, 3]) == pytest.approx(750.0)


def request_rows(arrivals: list[float], outputs: list[int]) -> list[dict]:
    """Requests served with a 2 ms prefill after 0.5 ms in the queue, and 1 ms gaps."""
    return [{"arrival_ms": a, "output_len": o, "queue_ms": 0.5, "ttft_ms": 2.5, "itl_ms_mean": 1.0 if o > 1 else None}
            for a, o in zip(arrivals, outputs)]


def test_slot_model_is_fitted_from_each_requests_prefill_and_gap() -> None:
    rows = request_rows([0.0, 1.0, 10.0], [10, 10, 1])
    rows[0].update(ttft_ms=5.0, itl_ms_mean=3.0)
    found = open_loop_interval([open_loop_draw(rows, {"output_tokens_per_s": 100.0})], 4,
                               [([0.0, 1.0, 10.0], [10, 10, 1])])
    # prefills 4.5, 2, 2 → median 2; gaps 3 and 1 (the one-token request has none) → median 2
    model = SlotModel(4, 2.0, 2.0)
    assert found.predicted == (pytest.approx(model.tokens_per_s([0.0, 1.0, 10.0], [10, 10, 1])),)


def test_the_queue_method_corrects_the_host_mean_by_the_measured_ratio() -> None:
    # with slots 1, prefill 2 and gaps of 1 ms: draw A (arrivals 0, 1, 10; outputs 10, 10, 2) makes 1000 tok/s
    # (above); draw B (arrivals 0, 5, 20; outputs 4 each) makes 3 + 4 tokens in (2, 20]: 7 / 18 ms = 388.9 tok/s.
    # The GPU runs 2 % under the model on both, and every host draw is draw A: the estimate is 1000 × 0.98,
    # and nothing widens the interval (the ratios agree, the host draws do not vary).
    a, b = ([0.0, 1.0, 10.0], [10, 10, 2]), ([0.0, 5.0, 20.0], [4, 4, 4])
    measured = [open_loop_draw(request_rows(*a), {"output_tokens_per_s": 0.98 * 1000.0}),
                open_loop_draw(request_rows(*b), {"output_tokens_per_s": 0.98 * 7 / 18 * 1000.0})]
    found = open_loop_interval(measured, 1, [a] * 4)
    assert found.method == "queue" and found.estimate == pytest.approx(980.0)
    assert found.predicted == (pytest.approx(1000.0), pytest.approx(7 / 18 * 1000.0))
    assert found.half == pytest.approx(0.0, abs=1e-12) and found.prediction_error_max == pytest.approx(0.02)
    # a host draw with no load window is rated over its wall, as the runner rates such a draw: three requests in
    # at 0 make 2–4, 6–8 and 10–12, 9 tokens in 12 ms (750 tok/s); the host mean is then (1000 + 750) / 2
    burst = open_loop_interval(measured, 1, [a, ([0.0, 0.0, 0.0], [3, 3, 3])])
    assert burst.estimate == pytest.approx((1000.0 + 750.0) / 2 * 0.98)


def test_the_host_draws_are_the_arrivals_and_lengths_the_engine_would_be_sent() -> None:
    spec = SweepSpec(model="tiny", mode="continuous", num_requests=6, output_len="uniform:1:50", seed=3)
    drawn = host_draws(spec, 4.0, 5)  # a point serving the first 5 of the 6 requests
    arrivals, outputs = drawn[2]
    sent = Arrivals([Request(i, 1, 1) for i in range(5)], rate=4.0, seed=workload.arrival_seed(spec, HOST_BASE + 2))
    assert arrivals == pytest.approx([t * 1e3 for t, _, _ in sorted(sent.due)])
    assert outputs == workload.draw(spec, 6, HOST_BASE + 2, 100, workload.CONTINUOUS).output_lens[:5]
    assert arrivals == sorted(arrivals) and drawn[2] != drawn[3]
