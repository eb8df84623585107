"""Throughput while the load is applied (runners/metrics/loaded.py): the window and its tokens, by hand."""
from __future__ import annotations

import pytest

from runners.metrics.loaded import loaded
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
