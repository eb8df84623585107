"""Sweep spec validation at its bounds (issue 16): types are the types the options declare, every number
the runner takes has a bound it can run at, and no check draws more requests than a sweep may."""
from __future__ import annotations

import pytest

from runners.spec import SpecError, validate
from runners.spec.sweep import MAX_REQUESTS
from runners.workload import workload

TINY = {"model": "tiny", "prompt_len": "fixed:8", "output_len": "fixed:2"}
CONTINUOUS = {**TINY, "mode": "continuous", "engine": "fast", "arrival": "poisson:4"}


def rejected(raw: dict) -> SpecError:
    with pytest.raises(SpecError) as caught:
        validate(raw)
    return caught.value


@pytest.mark.parametrize("value", ["false", "true", 0, 1, "no"])
def test_booleans_must_be_booleans(value) -> None:
    error = rejected({**TINY, "calibrate": value})
    assert error.field == "calibrate" and "true or false" in error.message


def test_true_and_false_are_taken_as_they_are() -> None:
    assert validate({**TINY, "calibrate": False}).calibrate is False
    assert validate({**TINY, "calibrate": True}).calibrate is True


def test_the_largest_seed_validation_accepts_is_one_the_runner_can_seed_with() -> None:
    largest = validate({**TINY, "seed": 2**32 - 1})
    for ids in (workload.STATIC, workload.CONTINUOUS):
        assert len(workload.draw(largest, 4, -1, 512, ids).prompt_ids) == 4
    error = rejected({**TINY, "seed": 100000000000000000000})
    assert error.field == "seed" and "4,294,967,295" in error.message


@pytest.mark.parametrize("raw, field, words", [
    ({**CONTINUOUS, "num_requests": 1_000_000_000}, "num_requests", f"at most {MAX_REQUESTS:,}"),
    ({**TINY, "max_batch_size": 100_000_000, "batch_sizes": [1]}, "max_batch_size", "at most 65,536"),
    ({**TINY, "max_batch_size": 100_000_000, "batch_sizes": [100_000_000]}, "batch_sizes", "at most 65,536"),
    ({**TINY, "max_batch_size": 65_536, "batch_sizes": "pow2:1:65536", "repeats": 3}, "batch_sizes",
     "would draw 786,426 requests"),  # 131,071 a draw × (1 warm-up + up to 5 measured draws)
    ({**CONTINUOUS, "num_requests": MAX_REQUESTS, "repeats": 1, "warmup": 1}, "num_requests",
     f"would draw {6 * MAX_REQUESTS:,} requests"),
])
def test_sizes_past_what_a_sweep_may_draw_are_one_line_before_anything_is_drawn(raw: dict, field: str,
                                                                                words: str) -> None:
    error = rejected(raw)
    assert (error.field, "\n" in str(error)) == (field, False) and words in error.message, error.message


def test_a_sweep_at_the_limit_is_valid() -> None:
    assert validate({**CONTINUOUS, "num_requests": MAX_REQUESTS // 6}).num_requests == MAX_REQUESTS // 6
    static = validate({**TINY, "max_batch_size": 65_536, "batch_sizes": [65_536], "repeats": 1, "warmup": 0,
                       "replays": 0, "max_draws": 1})
    assert static.batch_sizes == [65_536]
