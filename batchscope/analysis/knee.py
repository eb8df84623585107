"""Where a bigger batch stops paying: the plateau rule and Kneedle, both on log2 of the sweep axis.

Both read only the `ok` curve (see `curve.ok_curve`). The plateau rule is the one the working point
uses; Kneedle is shown for comparison because on a two-slope curve it stops at the first bend.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from kneed import KneeLocator

from runners.spec.refine import PLATEAU_GAIN

from batchscope.analysis.axis import BATCH, SweepAxis
from batchscope.units import tok_s
from batchscope.analysis.marker import Marker, pct
from batchscope.analysis.noise import describe_spread, unresolved_from


@dataclass(frozen=True)
class PlateauCall:
    """The plateau marker (None when not called) and the x the working point may go up to.

    `limit` is the plateau's x when it is called, the latest x the plateau can start at when
    noise leaves it undecided, and None when throughput never flattens.
    """

    marker: Marker | None
    limit: float | None
    notes: list[str] = field(default_factory=list)


def gains_per_doubling(curve: pd.DataFrame) -> np.ndarray:
    """Throughput gain of each step i → i+1, normalised to one doubling of x (the batch, say).

    gain = (T[i+1] / T[i]) ** (1 / log2(x[i+1] / x[i])) − 1, so 1 → 4 with 2× throughput reads as
    √2 − 1 ≈ 41 % per doubling, comparable with the steps of a powers-of-two grid.
    """
    tput = curve["output_tokens_per_s"].to_numpy(dtype=float)
    doublings = np.diff(curve["log2_x"].to_numpy(dtype=float))
    return (tput[1:] / tput[:-1]) ** (1.0 / doublings) - 1.0


def plateau(curve: pd.DataFrame, gain: float = PLATEAU_GAIN, axis: SweepAxis = BATCH,
            ceiling: float | None = None) -> PlateauCall:
    """The smallest batch after which every step adds less than `gain` throughput per doubling.

    Noise rule: the plateau at index i is called only if the step into it is resolved, i.e. the
    spreads of points i−1 and i do not overlap. Otherwise it is not called, a note names the run of
    overlapping points it could lie in, and the working point may still go up to point i.
    `ceiling` is the x that ran out of memory past the last ok point (see `curve.oom_ceiling`): a
    curve still rising into it is said to stop there, not to want larger batches.
    """
    xs = curve["x"].tolist()
    if len(xs) < 2:
        return PlateauCall(None, None, ["The plateau needs at least two ok points."])
    gains = gains_per_doubling(curve)
    start = len(xs) - 1
    while start > 0 and gains[start - 1] < gain:
        start -= 1
    if start == len(xs) - 1:
        return PlateauCall(None, None, [_still_rising(curve, gains[-1], axis, ceiling)])
    first = unresolved_from(curve, start)
    if first < start:
        return PlateauCall(None, xs[start], [_undecided(curve, first, start, axis)])
    return PlateauCall(Marker(xs[start], "plateau", _plateau_sentence(curve, start, gains[start], axis)),
                       xs[start])


def _plateau_sentence(curve: pd.DataFrame, i: int, step_gain: float, axis: SweepAxis) -> str:
    here, nxt = curve.iloc[i], curve.iloc[i + 1]
    x, x_next = here["x"], nxt["x"]
    t, t_next = here["output_tokens_per_s"], nxt["output_tokens_per_s"]
    change = f"adds only {pct(step_gain, 1)}" if step_gain >= 0 else f"loses {pct(-step_gain, 1)}"
    if math.isclose(x_next, 2 * x):
        return (f"Doubling past {axis.at(x)} {change} throughput ({tok_s(t)} → {tok_s(t_next)}), "
                f"so the plateau starts at {axis.value(x)}.")
    return (f"Past {axis.at(x)} throughput {change} per doubling ({tok_s(t)} at {axis.value(x)} → "
            f"{tok_s(t_next)} at {axis.value(x_next)}), so the plateau starts at {axis.value(x)}.")


def _still_rising(curve: pd.DataFrame, last_gain: float, axis: SweepAxis, ceiling: float | None) -> str:
    prev, last = curve.iloc[-2], curve.iloc[-1]
    rise = (f"No plateau: going from {axis.at(prev['x'])} to {axis.value(last['x'])} still "
            f"adds {pct(last_gain, 1)} throughput per doubling ({tok_s(prev['output_tokens_per_s'])} → "
            f"{tok_s(last['output_tokens_per_s'])})")
    if ceiling is not None:
        return (f"{rise}, but {axis.at(ceiling)} ran out of memory, so {axis.value(last['x'])} is as far as "
                f"this device goes for this workload.")
    return f"{rise}, so {axis.larger} may still help."


def _undecided(curve: pd.DataFrame, first: int, start: int, axis: SweepAxis) -> str:
    low, high = curve.iloc[first], curve.iloc[start]
    spreads = "; ".join(f"{axis.at(p['x'])}: {describe_spread(p)}" for _, p in curve.iloc[first:start + 1].iterrows())
    return (f"The plateau could not be called between {axis.at(low['x'])} and "
            f"{axis.value(high['x'])}: their repeat spreads overlap ({spreads}), so the rise between "
            f"them is within noise. The working point may go up to {axis.value(high['x'])}, the latest "
            f"the plateau can start.")


def kneedle(curve: pd.DataFrame, axis: SweepAxis = BATCH) -> Marker | None:
    """Kneedle's knee of throughput vs log2(x) (concave, increasing), or None when it finds none.

    `kneed` also reports "knees" on or below the chord between the first and last point (at the
    convex foot of a curve that doubles at first); a knee of a concave curve lies above the chord, so
    those are skipped, and the first knee above it is taken, as Kneedle's offline mode does.
    """
    if len(curve) < 3:
        return None
    x = curve["log2_x"].to_numpy(dtype=float)
    y = curve["output_tokens_per_s"].to_numpy(dtype=float)
    if np.ptp(y) == 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        locator = KneeLocator(x, y, curve="concave", direction="increasing", online=True)
    chord = y[0] + (y[-1] - y[0]) * (x - x[0]) / (x[-1] - x[0])
    for knee in locator.all_knees:
        index = int(np.flatnonzero(np.isclose(x, knee))[0])
        # kneed's own difference curve uses min/max-normalised y, which is not the first-to-last chord
        # when the curve dips early, so the chord test is done here on the raw values; the endpoints
        # lie on the chord by definition and are never a knee
        if 0 < index < len(x) - 1 and y[index] > chord[index]:
            return _kneedle_marker(curve, index, axis)
    return None


def _kneedle_marker(curve: pd.DataFrame, index: int, axis: SweepAxis) -> Marker:
    point = curve.iloc[index]
    best = curve["output_tokens_per_s"].max()
    return Marker(point["x"], "Kneedle", (
        f"Kneedle, which looks for the point farthest above the straight line from the smallest to the "
        f"largest {axis.noun} on a log2 axis, puts the knee at {axis.at(point['x'])} ({tok_s(point['output_tokens_per_s'])}, "
        f"{pct(point['output_tokens_per_s'] / best)} of the best measured)."))
