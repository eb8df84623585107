"""The noise rule: a knee is never placed between two points whose repeat spreads overlap.

A point's spread is [output_tokens_per_s_min, output_tokens_per_s_max] over its repeats (just the
median when a bound is missing, e.g. a single repeat). Two spreads overlap when
max(low_a, low_b) ≤ min(high_a, high_b): then some repeat of the smaller batch was at least as fast as
some repeat of the larger one, so the rise between them is not resolved by the measurement.
"""
from __future__ import annotations

import pandas as pd

from batchscope.analysis.marker import num


def spread(point: pd.Series) -> tuple[float, float]:
    """(low, high) throughput over the point's repeats; the median stands in for a missing bound."""
    median = float(point["output_tokens_per_s"])
    low = point.get("output_tokens_per_s_min")
    high = point.get("output_tokens_per_s_max")
    low = median if low is None or pd.isna(low) else float(low)
    high = median if high is None or pd.isna(high) else float(high)
    return low, high


def spreads_overlap(a: pd.Series, b: pd.Series) -> bool:
    """True when the two points' repeat spreads share any throughput value."""
    low_a, high_a = spread(a)
    low_b, high_b = spread(b)
    return max(low_a, low_b) <= min(high_a, high_b)


def unresolved_from(curve: pd.DataFrame, index: int) -> int:
    """The first index of the run of points ending at `index` whose neighbours' spreads all overlap.

    Equals `index` when the step into it is resolved (spreads apart). Otherwise a knee placed at
    `index` could as well sit at any point of that run, so it cannot be called there.
    """
    start = index
    while start > 0 and spreads_overlap(curve.iloc[start - 1], curve.iloc[start]):
        start -= 1
    return start


def describe_spread(point: pd.Series) -> str:
    """The spread as "1 900–2 050 tok/s", for the sentences that explain a noise call."""
    low, high = spread(point)
    return f"{num(low)}–{num(high)} tok/s"
