"""Throughput while the load is applied (runners/metrics/loaded.py): the window and its tokens, and which
requests' latencies count, by hand."""
from __future__ import annotations

import pytest

from runners.engines.continuous import RunResult, StepRecord
from runners.engines.scheduler import Request
from runners.metrics.continuous import continuous_repeat, summarise
from runners.metrics.loaded import counts, loaded
from runners.metrics.repeat import repeat_row


def test_a_closed_loops_drain_after_the_last_arrival_is_left_out() -> None:
    # two clients, two requests each: requests 0 and 1 arrive at 0; 0 ends at 40 ms, so 2 arrives then;
    # 1 ends at 60 ms and 3 arrives: the last arrival. Tokens every 10 ms from 10 ms on.
    arrivals = [0.0, 0.0, 40.0, 60.0]
    tokens = [[10.0, 20.0, 30.0, 40.0], [10.0, 20.0, 30.0, 40.0, 50.0, 60.0], [50.0, 60.0, 70.0],
              [70.0, 80.0, 90.0, 100.0]]
    load = loaded(arrivals, tokens)
    # window (10, 60]: request 0 makes 20, 30, 40; request 1 makes 20…60; request 2 makes 50, 60
    assert (load.start_ms, load.end_ms, load.output_tokens) == (10.0, 60.0, 3 + 5 + 2)
    assert load.ms == 50.0 and load.output_tokens_per_s == pytest.approx(10 / 0.050)
    # the whole wall (100 ms, 17 tokens) would read 170 tok/s, dragged down by request 3 alone at the end
    assert load.output_tokens_per_s == pytest.approx(200.0)


def test_a_load_sent_at_once_or_before_any_token_has_no_window() -> None:
    assert loaded([0.0, 0.0], [[5.0, 6.0], [5.0]]) is None  # every client's one request at the start
    assert loaded([0.0, 3.0], [[5.0, 6.0], [7.0]]) is None  # the last arrived before the first token
    assert loaded([], []) is None
    assert loaded([0.0, 9.0], [[], []]) is None  # nothing made
    # a burst: the last request arrived at 4 ms, after the first token (3 ms) but before the next step's
    # tokens (8 ms), so the window (3, 4] holds no token; rated over it the repeat would read 0 tok/s
    assert loaded([0.0, 1.0, 4.0], [[3.0, 8.0], [8.0, 13.0], [13.0]]) is None


def test_a_repeat_row_rates_output_over_the_window_and_the_rest_over_the_wall() -> None:
    base = {"point_index": 0, "repeat": 0, "batch_size": 2}
    load = loaded([0.0, 0.0, 40.0, 60.0], [[10.0, 40.0], [10.0, 60.0], [50.0], [70.0, 100.0]])
    row = repeat_row(base, 100.0, None, None, 7, 40, 4, load)
    assert (row["loaded_start_ms"], row["loaded_end_ms"], row["loaded_output_tokens"]) == (10.0, 60.0, 3)
    # 40, 60 and 50 lie in (10, 60]
    assert row["output_tokens_per_s"] == pytest.approx(3 / 0.050)
    assert row["input_tokens_per_s"] == pytest.approx(400.0) and row["requests_per_s"] == pytest.approx(40.0)
    static = repeat_row(base, 100.0, 10.0, 90.0, 7, 40, 2)
    assert static["output_tokens_per_s"] == pytest.approx(70.0) and static["loaded_start_ms"] is None


def test_a_request_counts_when_it_arrived_inside_the_window_or_its_repeat_has_none() -> None:
    load = loaded([0.0, 0.0, 40.0, 60.0], [[10.0, 40.0], [10.0, 60.0], [50.0], [70.0, 100.0]])  # (10, 60]
    assert [counts(t, load) for t in (0.0, 9.9, 10.0, 40.0, 60.0, 60.1)] == [False, False, True, True, True, False]
    assert counts(0.0, None)  # a load sent at once: every request is the load


def test_a_closed_loops_first_round_is_left_out_of_its_latency_percentiles() -> None:
    # two clients, two requests each, as above; the first round waits for prefill together: request 1's first
    # token comes at 30 ms (TTFT 30, queued 20 ms), the second round's come 10 ms after their arrivals
    def request(index: int, arrival: float, admit: float, tokens: list[float]) -> Request:
        return Request(index, 16, len(tokens), client=index % 2, arrival_s=arrival / 1e3, admit_s=admit / 1e3,
                       token_s=[t / 1e3 for t in tokens])

    result = RunResult(
        requests=[request(0, 0.0, 0.0, [10.0, 25.0, 40.0]), request(1, 0.0, 20.0, [30.0, 45.0, 60.0]),
                  request(2, 40.0, 40.0, [50.0, 60.0, 70.0]), request(3, 60.0, 60.0, [70.0, 80.0, 90.0, 100.0])],
        steps=[StepRecord(0.0, 0.01, 32, 0, 0, 2, 34, 4, 0), StepRecord(0.01, 0.1, 0, 9, 2, 2, 40, 4, 0)],
        admission_waits=0, preemptions=0)
    rep = continuous_repeat(0, 0, 2, result, "ttft", 1000.0)
    assert [(r["arrival_ms"], r["latency_counted"]) for r in rep.requests] == [
        (0.0, False), (0.0, False), (40.0, True), (60.0, True)]  # the window is (10, 60]
    assert rep.itl == [10.0] * 5  # only the second round's gaps; the first round's are 15 ms
    point = summarise(0, 2, [rep], 0, pool_blocks=8, block_size=16, slo_metric="ttft", slo_ms=1000.0).row()
    assert point["latency_requests"] == 2
    assert point["ttft_ms_p95"] == pytest.approx(10.0)  # over all four it would be 27 ms (10, 10, 10, 30)
    assert point["itl_ms_p95"] == pytest.approx(10.0) and point["queue_ms_p95"] == pytest.approx(0.0)
    assert point["e2e_ms_p50"] == pytest.approx(35.0)  # 30 and 40 ms; the first round's 40 and 60 left out
    assert point["prompt_len_mean"] == 16 and point["output_len_mean"] == pytest.approx(13 / 4)  # lengths: all
