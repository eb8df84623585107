"""The measured throughput curve the knee rules read: one run's `ok` points in order along its axis."""
from __future__ import annotations

import numpy as np
import pandas as pd

from batchscope.analysis.axis import SweepAxis, sweep_x
from batchscope.analysis.marker import num


def ok_curve(points: pd.DataFrame) -> pd.DataFrame:
    """The `ok` points sorted by `x` (see `axis.sweep_x`), with `log2_x`; OOM and error points never
    enter a fit.

    Raises ValueError when an x value repeats, because the knee of two runs mixed together is
    meaningless: analyse one run at a time.
    """
    ok = points[points["status"] == "ok"]
    ok = ok.assign(x=sweep_x(ok)).sort_values("x").reset_index(drop=True)
    repeated = ok["x"][ok["x"].duplicated()].tolist()
    if repeated:
        shown = ", ".join(num(x) for x in sorted(set(repeated)))
        raise ValueError(f"sweep value(s) {shown} appear more than once: analyse one run at a time")
    return ok.assign(log2_x=np.log2(ok["x"]))


def oom_ceiling(points: pd.DataFrame, curve: pd.DataFrame) -> float | None:
    """The smallest x past the largest ok point that ran out of memory: the device's limit for this run,
    beyond which no sentence may suggest going (None when nothing larger ran out of memory)."""
    top = curve["x"].max() if not curve.empty else float("-inf")
    ooms = sweep_x(points)[(points["status"] == "oom") & (sweep_x(points) > top)]
    return float(ooms.min()) if not ooms.empty else None


def excluded_notes(points: pd.DataFrame, axis: SweepAxis) -> list[str]:
    """One note per OOM or error point: it is shown but left out of every fit."""
    notes = []
    for row in points.assign(x=sweep_x(points))[points["status"] != "ok"].sort_values("x").itertuples():
        if row.status == "oom":
            notes.append(f"{axis.at_start(row.x)} ran out of memory; it is shown but excluded from the fits.")
        else:
            error = getattr(row, "error", None)
            detail = f": {error}" if isinstance(error, str) and error else ""
            notes.append(f"{axis.at_start(row.x)} failed ({row.status}{detail}); it is excluded from the fits.")
    return notes

