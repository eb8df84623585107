"""Where a bigger batch stops paying: the plateau rule and Kneedle, both on log2(batch).

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

from batchscope.analysis.curve import tok_s
from batchscope.analysis.marker import Marker, pct
from batchscope.analysis.noise import describe_spread, unresolved_from


@dataclass(frozen=True)
class PlateauCall:
    """The plateau marker (None when not called) and the batch the working point may go up to.

    `limit` is the plateau batch when it is called, the latest batch the plateau can start at when
    noise leaves it undecided, and None when throughput never flattens.
    """

    marker: Marker | None
    limit: int | None
    notes: list[str] = field(default_factory=list)


def gains_per_doubling(curve: pd.DataFrame) -> np.ndarray:
    """Throughput gain of each step i → i+1, normalised to one doubling of the batch.

    gain = (T[i+1] / T[i]) ** (1 / log2(b[i+1] / b[i])) − 1, so 1 → 4 with 2× throughput reads as
    √2 − 1 ≈ 41 % per doubling, comparable with the steps of a powers-of-two grid.
    """
    tput = curve["output_tokens_per_s"].to_numpy(dtype=float)
    doublings = np.diff(curve["log2_batch"].to_numpy(dtype=float))
    return (tput[1:] / tput[:-1]) ** (1.0 / doublings) - 1.0


def plateau(curve: pd.DataFrame, gain: float = 0.10) -> PlateauCall:
    """The smallest batch after which every step adds less than `gain` throughput per doubling.

    Noise rule: the plateau at index i is called only if the step into it is resolved, i.e. the
    spreads of points i−1 and i do not overlap. Otherwise it is not called, a note names the run of
    overlapping points it could lie in, and the working point may still go up to batch i.
    """
    batches = curve["batch_size"].tolist()
    if len(batches) < 2:
        return PlateauCall(None, None, ["The plateau needs at least two ok points."])
    gains = gains_per_doubling(curve)
    start = len(batches) - 1
    while start > 0 and gains[start - 1] < gain:
        start -= 1
    if start == len(batches) - 1:
        return PlateauCall(None, None, [_still_rising(curve, gains[-1])])
    first = unresolved_from(curve, start)
    if first < start:
        return PlateauCall(None, batches[start], [_undecided(curve, first, start)])
    return PlateauCall(Marker(batches[start], "plateau", _plateau_sentence(curve, start, gains[start])),
                       batches[start])


def _plateau_sentence(curve: pd.DataFrame, i: int, step_gain: float) -> str:
    here, nxt = curve.iloc[i], curve.iloc[i + 1]
    b, b_next = int(here["batch_size"]), int(nxt["batch_size"])
    t, t_next = here["output_tokens_per_s"], nxt["output_tokens_per_s"]
    change = f"adds only {pct(step_gain, 1)}" if step_gain >= 0 else f"loses {pct(-step_gain, 1)}"
    if math.isclose(b_next, 2 * b):
        return (f"Doubling past batch {b} {change} throughput ({tok_s(t)} → {tok_s(t_next)}), "
                f"so the plateau starts at {b}.")
    return (f"Past batch {b} throughput {change} per doubling ({tok_s(t)} at {b} → {tok_s(t_next)} "
            f"at {b_next}), so the plateau starts at {b}.")


def _still_rising(curve: pd.DataFrame, last_gain: float) -> str:
    prev, last = curve.iloc[-2], curve.iloc[-1]
    return (f"No plateau: going from batch {int(prev['batch_size'])} to {int(last['batch_size'])} still "
            f"adds {pct(last_gain, 1)} throughput per doubling ({tok_s(prev['output_tokens_per_s'])} → "
            f"{tok_s(last['output_tokens_per_s'])}), so larger batches may still help.")


def _undecided(curve: pd.DataFrame, first: int, start: int) -> str:
    low, high = curve.iloc[first], curve.iloc[start]
    spreads = "; ".join(f"batch {int(p['batch_size'])}: {describe_spread(p)}"
                        for _, p in curve.iloc[first:start + 1].iterrows())
    return (f"The plateau could not be called between batch {int(low['batch_size'])} and "
            f"{int(high['batch_size'])}: their repeat spreads overlap ({spreads}), so the rise between "
            f"them is within noise. The working point may go up to {int(high['batch_size'])}, the latest "
            f"the plateau can start.")


def kneedle(curve: pd.DataFrame) -> Marker | None:
    """Kneedle's knee of throughput vs log2(batch) (concave, increasing), or None when it finds none.

    `kneed` also reports "knees" on or below the chord between the first and last point (at the
    convex foot of a curve that doubles at first); a knee of a concave curve lies above the chord, so
    those are skipped, and the first knee above it is taken, as Kneedle's offline mode does.
    """
    if len(curve) < 3:
        return None
    x = curve["log2_batch"].to_numpy(dtype=float)
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
            return _kneedle_marker(curve, index)
    return None


def _kneedle_marker(curve: pd.DataFrame, index: int) -> Marker:
    point = curve.iloc[index]
    best = curve["output_tokens_per_s"].max()
    b = int(point["batch_size"])
    return Marker(b, "Kneedle", (
        f"Kneedle, which looks for the point farthest above the straight line from the smallest to the "
        f"largest batch on a log2 axis, puts the knee at batch {b} ({tok_s(point['output_tokens_per_s'])}, "
        f"{pct(point['output_tokens_per_s'] / best)} of the best measured)."))
