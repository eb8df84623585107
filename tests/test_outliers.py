"""Outlier steps, checked by hand: steps over 5× the median of their group (phase, batch rows, prefill
token bucket), and how a static batch's steps carry the token counts that group them."""
from __future__ import annotations

import pytest

from runners.engines.base import Batch, Generation
from runners.metrics.outliers import outlier_steps, token_bucket
from runners.metrics.static import static_repeat, summarise


def step(phase: str, rows: int, prefill: int, ms: float) -> dict:
    return {"phase": phase, "batch_rows": rows, "prefill_tokens": prefill, "duration_ms": ms}


@pytest.mark.parametrize("tokens, bucket", [(0, 0), (1, 1), (2, 2), (3, 4), (512, 512), (513, 1024), (2038, 2048)])
def test_token_bucket_is_the_next_power_of_two(tokens: int, bucket: int) -> None:
    assert token_bucket(tokens) == bucket


def test_only_a_step_over_five_times_its_groups_median_counts() -> None:
    steps = [
        # decode at 8 rows: median of [1, 1, 1, 1, 5.1] is 1 → 5.1 ms is an outlier; 5.0 would not be (not over 5×)
        *[step("decode", 8, 0, 1.0) for _ in range(4)], step("decode", 8, 0, 5.1),
        # decode at 16 rows is its own group: 3 ms next to 1 ms steps of 8 rows is no outlier
        step("decode", 16, 0, 3.0),
        # prefills of 300 and 500 tokens share the 512 bucket: median of [10, 12, 70] is 12 → 70 > 60 counts
        step("prefill", 0, 300, 10.0), step("prefill", 0, 500, 12.0), step("prefill", 0, 400, 70.0),
        # a 2 000-token prefill is alone in the 2048 bucket, however slow
        step("prefill", 0, 2000, 500.0),
        # a mixed step is never compared with a prefill-only one of the same bucket
        step("mixed", 4, 300, 40.0),
    ]
    assert outlier_steps(steps) == 2
    assert outlier_steps([*steps[:4], step("decode", 8, 0, 5.0)]) == 0


def test_a_single_slow_step_of_its_kind_and_no_steps_are_not_outliers() -> None:
    assert outlier_steps([step("decode", 1, 0, 100.0)]) == 0
    assert outlier_steps([]) == 0


def test_static_steps_carry_their_token_counts_and_the_summary_counts_outliers() -> None:
    # rows of prompts 4 and 2 (padded to 4) with outputs 7 and 3; decode steps take 1 ms except step 5 (9 ms)
    batch = Batch(prompt_ids=[[1, 2, 3, 4], [5, 6]], output_lens=[7, 3])
    token_ms = [10.0, 11.0, 12.0, 13.0, 14.0, 23.0, 24.0]
    rep = static_repeat(0, 0, batch, Generation(token_ms=token_ms, tokens=[[1] * 7] * 2, timing="perf_counter"))
    assert [(s["prefill_tokens"], s["decode_tokens"]) for s in rep.steps] == [
        (8, 0), (0, 2), (0, 2), (0, 1), (0, 1), (0, 1), (0, 1)]  # prefill 2 rows × 4; row 2 stops after token 3
    assert summarise(0, 2, [rep], warmup=0)["outlier_steps"] == 1  # decode steps [1,1,1,1,9,1]: median 1, 9 > 5
