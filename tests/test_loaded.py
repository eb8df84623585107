"""Throughput while the load is applied (runners/metrics/loaded.py): the window and its tokens, and which
requests' latencies count, by hand."""
from __future__ import annotations

import pytest

from runners.engines.continuous import RunResult, StepRecord
from runners.engines.scheduler import Request
from runners.metrics.continuous import continuous_repeat, summarise
from runners.metrics.loaded import counts, loaded, step_counts
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


def test_a_continuous_points_decode_step_and_its_rows_are_the_windows_decode_only_steps() -> None:
    # two clients, two requests each (the window is (10, 60] as above); steps of 10 ms, then the drain: request 3
    # alone for 40 ms at 5 ms a step. Steps by end: 10 prefill; 20, 30 decode (2 rows); 40 decode (2 rows);
    # 50 mixed; 60 decode (2 rows); then 65…100 decode with 1 row: eight drain steps that outnumber the five
    # decode-only steps under the load, so a median over every decode-only step would read 5 ms, the drain's.
    def request(index: int, arrival: float, tokens: list[float]) -> Request:
        return Request(index, 16, len(tokens), client=index % 2, arrival_s=arrival / 1e3, admit_s=arrival / 1e3,
                       token_s=[t / 1e3 for t in tokens])

    def step(start: float, end: float, prefill: int, decode: int, running: int, kv: int) -> StepRecord:
        return StepRecord(start / 1e3, end / 1e3, prefill, decode, max(decode, 1), running, kv, 4, 0)

    under_load = [step(10, 20, 0, 2, 2, 40), step(20, 30, 0, 2, 2, 42), step(30, 40, 0, 2, 2, 44),
                  step(50, 60, 0, 2, 2, 50)]
    drain = [step(60 + 5 * k, 65 + 5 * k, 0, 1, 1, 20 + k) for k in range(8)]
    result = RunResult(
        requests=[request(0, 0.0, [10.0, 20.0, 30.0, 40.0]), request(1, 0.0, [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]),
                  request(2, 40.0, [50.0, 60.0]), request(3, 60.0, [65.0 + 5 * k for k in range(8)])],
        steps=[step(0, 10, 32, 0, 2, 32), *under_load[:3], step(40, 50, 16, 2, 3, 62), under_load[3], *drain],
        admission_waits=0, preemptions=0)
    rep = continuous_repeat(0, 0, 2, result, "ttft", 1000.0)
    assert (rep.row["loaded_start_ms"], rep.row["loaded_end_ms"]) == (10.0, 60.0)
    point = summarise(0, 2, [rep], 0, pool_blocks=8, block_size=16, slo_metric="ttft", slo_ms=1000.0).row()
    # the decode-only steps ending at 20, 30, 40 and 60 ms: 10 ms each, 2 rows, 40 + 42 + 44 + 50 KV tokens
    assert point["decode_step_ms"] == pytest.approx(10.0) and point["decode_step_ms_p95"] == pytest.approx(10.0)
    assert point["active_seqs_mean"] == pytest.approx(2.0)
    assert point["active_tokens_mean"] == pytest.approx(44.0) and point["active_tokens_max"] == 50
    assert point["kv_occupancy_max"] == pytest.approx(62 / 128)  # the pool's occupancy stays over every step
    # a load sent at once has no window: every decode-only step is the load's
    rep.row.update(loaded_start_ms=None, loaded_end_ms=None, loaded_output_tokens=None)
    whole = summarise(0, 2, [rep], 0, pool_blocks=8, block_size=16, slo_metric="ttft", slo_ms=1000.0).row()
    assert whole["decode_step_ms"] == pytest.approx(5.0) and whole["active_seqs_mean"] == pytest.approx(16 / 12)


def test_a_step_counts_when_it_ended_inside_the_window_as_its_tokens_do() -> None:
    load = loaded([0.0, 60.0], [[10.0, 60.0], [70.0]])  # (10, 60]
    ends = [(0.0, 10.0), (5.0, 10.0), (50.0, 10.0), (55.0, 10.0)]  # ending at 10, 15, 60, 65 ms
    assert [step_counts({"start_ms": s, "duration_ms": d}, load) for s, d in ends] == [False, True, True, False]
    assert step_counts({"start_ms": 500.0, "duration_ms": 1.0}, None)
