"""Adaptive refinement: after a sweep's planned points, which value to measure next, and why.

Torch-free and standard library only, because the runner decides on the GPU host (no kneed, no numpy)
and the app checks its own rules against this one on the same curves (tests/test_refine.py).

Two brackets are narrowed, the SLO's first, each by measuring its midpoint:
- SLO: between the largest ok value whose latency percentile meets the SLO and the next ok value,
  which breaks it (the app's SLO limit, batchscope.analysis.slo.slo_limit); where latency falls along the
  axis (max_num_seqs at a fixed rate, runners.spec.slo.latency_falls), between the smallest value that meets
  it and the one before;
- knee: between the value before the plateau and the plateau's start, where throughput stops adding
  PLATEAU_GAIN per doubling (the app's plateau rule, batchscope.analysis.knee.plateau, whose `limit`
  is this start whether or not noise lets it call the marker).
A bracket is done when its ends are within `tolerance` of each other (hi ≤ lo × (1 + tolerance)), or
neighbours on a whole-number axis, or when its midpoint was already tried (a point there failed).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from runners.spec.options import copy_given, record
from runners.spec.slo import SLO, latency_falls, parse_slo
from runners.spec.sweep import SweepSpec

PLATEAU_GAIN = 0.10  # the app's default plateau threshold (batchscope.analysis.knee.plateau)
REASONS = ("slo", "knee")  # what an added point's `added_for` column says


def parse_target(text: str) -> SLO:
    """`ttft:95:1000` → the SLO refinement brackets; the app's URL writes an SLO the same way."""
    return parse_slo(text, "refine_slo")


@dataclass(frozen=True)
class Seen:
    """A measured point as refinement reads it; `ok` False for an OOM or error (never in a bracket)."""

    x: float
    ok: bool
    tokens_per_s: float | None = None
    latency_ms: float | None = None


@dataclass(frozen=True)
class Proposal:
    """The next value to measure, the bracket it halves and which one (`reason`: slo or knee)."""

    x: float
    reason: str
    lo: float
    hi: float


def _curve(seen: list[Seen]) -> list[Seen]:
    return sorted((s for s in seen if s.ok and s.tokens_per_s is not None), key=lambda s: s.x)


def slo_index(curve: list[Seen], target: SLO) -> int | None:
    """Index of the SLO limit: the largest value whose latency meets the target, or the smallest where
    latency falls along the axis (a missing latency never meets it)."""
    meets = [i for i, s in enumerate(curve) if s.latency_ms is not None and s.latency_ms <= target.ms]
    if not meets:
        return None
    return meets[0] if latency_falls(s.latency_ms for s in curve) else meets[-1]


def plateau_index(curve: list[Seen], gain: float = PLATEAU_GAIN) -> int | None:
    """Index of the smallest value after which every step adds less than `gain` per doubling; None
    while the last step still adds that much (or with fewer than two points).

    A step's gain is normalised to one doubling: (T[i+1] / T[i]) ** (1 / log2(x[i+1] / x[i])) − 1.
    """
    if len(curve) < 2:
        return None
    gains = [(b.tokens_per_s / a.tokens_per_s) ** (1.0 / math.log2(b.x / a.x)) - 1.0 if a.tokens_per_s > 0
             else math.inf for a, b in zip(curve, curve[1:])]
    start = len(curve) - 1
    while start > 0 and gains[start - 1] < gain:
        start -= 1
    return None if start == len(curve) - 1 else start


def brackets(seen: list[Seen], target: SLO | None, gain: float = PLATEAU_GAIN) -> list[tuple[str, float, float]]:
    """(reason, lo, hi) of each bracket worth narrowing, the SLO's first."""
    curve = _curve(seen)
    found = []
    limit = slo_index(curve, target) if target is not None else None
    if limit is not None:
        beyond = limit - 1 if latency_falls(s.latency_ms for s in curve) else limit + 1
        if 0 <= beyond < len(curve):
            lo, hi = sorted((curve[limit].x, curve[beyond].x))
            found.append(("slo", lo, hi))
    start = plateau_index(curve, gain)
    if start:  # a plateau from the smallest value has nothing below it to narrow
        found.append(("knee", curve[start - 1].x, curve[start].x))
    return found


def midpoint(lo: float, hi: float, whole: bool) -> float | None:
    """The value halfway: the integer midpoint on a whole-number axis, else the geometric mean to three
    significant digits (an arrival rate); None when no value lies strictly between."""
    if whole:
        middle = (int(lo) + int(hi)) // 2
    else:
        middle = float(f"{math.sqrt(lo * hi):.3g}")
    return float(middle) if lo < middle < hi else None


def narrow(lo: float, hi: float, tolerance: float, whole: bool) -> bool:
    """True when the bracket is as fine as asked: hi within `tolerance` of lo, or neighbours."""
    return hi <= lo * (1.0 + tolerance) or (whole and hi - lo <= 1)


def next_point(seen: list[Seen], target: SLO | None, tolerance: float, whole: bool,
               gain: float = PLATEAU_GAIN) -> Proposal | None:
    """The value to measure next, or None when every bracket is narrow enough (or cannot be split)."""
    tried = {s.x for s in seen}
    for reason, lo, hi in brackets(seen, target, gain):
        if narrow(lo, hi, tolerance, whole):
            continue
        middle = midpoint(lo, hi, whole)
        if middle is not None and middle not in tried:
            return Proposal(middle, reason, lo, hi)
    return None


def at(point: Any, value: float, reason: str) -> Any:
    """A copy of a planned point at another value of its axis, marked as added for `reason`."""
    axis = point.axis
    typed = float(value) if axis == "arrival_rate" else int(value)
    return dataclasses.replace(point, **{axis: typed}, added_for=reason)


def is_whole(point: Any) -> bool:
    """Batch sizes, max_num_seqs and clients are whole numbers; an arrival rate is not."""
    return point.axis != "arrival_rate"


def check(spec: SweepSpec, values: dict[str, Any], found: dict[str, str]) -> None:
    """Parse the refinement options into `spec`, recording every problem by field in `found`."""
    copy_given(spec, values, "refine_points", "refine_slo", "refine_tolerance")
    if spec.refine_slo:
        record(found, "refine_slo", lambda: parse_target(spec.refine_slo))
