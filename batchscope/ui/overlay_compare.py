"""Comparing overlaid runs like with like: which axis values each lacks, and the knee and working point of
each read over only the values every run measured (History's side by side)."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from batchscope.analysis.curve import ok_curve
from batchscope.analysis.knee import kneedle, plateau
from batchscope.analysis.marker import Marker
from batchscope.analysis.working_point import working_point
from batchscope.ui.run_view import RunData


def measured(data: RunData) -> set[float]:
    """The axis values at which a run has an ok point."""
    table = data.analysis.table
    return set(table.loc[table["status"] == "ok", "x"].astype(float))


def lacking(overlay: dict[str, RunData]) -> dict[str, list[float]]:
    """Per run, the values another overlaid run measured and it did not."""
    values = {label: measured(data) for label, data in overlay.items()}
    every = set().union(*values.values())
    return {label: sorted(every - found) for label, found in values.items()}


def shared(overlay: dict[str, RunData]) -> list[float]:
    """The values every overlaid run measured."""
    return sorted(set.intersection(*(measured(data) for data in overlay.values())))


def lacking_words(overlay: dict[str, RunData]) -> list[str]:
    """One sentence per run that lacks values ("fp8 lacks batch 64."), or one saying none does."""
    gaps = {label: missing for label, missing in lacking(overlay).items() if missing}
    if not gaps:
        return ["Every overlaid run measured the same values, so their markers compare directly."]
    return [f"{label} lacks {overlay[label].analysis.axis.noun} "
            f"{', '.join(overlay[label].analysis.axis.value(x) for x in missing)}." for label, missing in gaps.items()]


@dataclass(frozen=True)
class Compared:
    """A run's markers as the side by side compares them: over the shared values when the runs' values
    differ (`shared_only`), else its own analysis's; None where there are too few shared values."""

    plateau: Marker | None
    kneedle: Marker | None
    working_point: Marker | None


def compared(overlay: dict[str, RunData]) -> tuple[dict[str, Compared], str | None]:
    """Each run's markers to compare, and the sentence that says over which values (None when the runs
    measured the same values, and their own markers are compared)."""
    common = shared(overlay)
    if not any(lacking(overlay).values()):
        return {label: Compared(d.analysis.plateau, d.analysis.kneedle, d.analysis.working_point)
                for label, d in overlay.items()}, None
    axis = next(iter(overlay.values())).analysis.axis
    if len(common) < 2:
        listed = ", ".join(axis.value(x) for x in common) or "none"
        return ({label: Compared(None, None, None) for label in overlay},
                f"Knees and working points are not compared: the runs share {len(common)} {axis.noun} value(s) "
                f"({listed}), and a knee needs at least two.")
    found = {}
    for label, data in overlay.items():
        analysis = data.analysis
        curve = ok_curve(analysis.table[analysis.table["x"].isin(common)])
        call = plateau(curve, analysis.plateau_gain, axis)
        point, _ = working_point(curve, call, analysis.slo, axis)
        found[label] = Compared(call.marker, kneedle(curve, axis), point)
    return found, (f"Knees and working points are compared over the {len(common)} {axis.noun} values every run "
                   f"measured ({', '.join(axis.value(x) for x in common)}); each run's own are on its Run page.")


def at_point(data: RunData, marker: Marker | None) -> pd.Series | None:
    """The run's ok point at a marker's x, or None."""
    if marker is None:
        return None
    table = data.analysis.table
    rows = table[(table["status"] == "ok") & (table["x"] == marker.x)]
    return None if rows.empty else rows.iloc[0]
