"""Outlier steps (docs/design.md §3, measurement hygiene): a compile, an autotune or an allocation inside a measured
step shows as a step far slower than its peers, so a point counts them."""
from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

OUTLIER_FACTOR = 5.0


def token_bucket(tokens: int) -> int:
    """The smallest power of two ≥ tokens (0 stays 0): steps of about the same prefill work."""
    return 0 if tokens <= 0 else 1 << (tokens - 1).bit_length()


def outlier_steps(steps: list[dict[str, Any]]) -> int:
    """How many steps last over OUTLIER_FACTOR × the median of their group, the steps with the same phase,
    batch rows and prefill token bucket (so a long prefill is never compared with a decode step)."""
    groups: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for s in steps:
        groups[(s["phase"], s["batch_rows"], token_bucket(s.get("prefill_tokens") or 0))].append(s["duration_ms"])
    outliers = 0
    for durations in groups.values():
        limit = OUTLIER_FACTOR * statistics.median(durations)  # once a group: a point holds thousands of steps
        outliers += sum(d > limit for d in durations)
    return outliers
