"""The measured throughput curve the knee rules read: one run's `ok` points in batch order."""
from __future__ import annotations

import numpy as np
import pandas as pd

from batchscope.analysis.marker import num


def ok_curve(points: pd.DataFrame) -> pd.DataFrame:
    """The `ok` points sorted by batch size, with `log2_batch`; OOM and error points never enter a fit.

    Raises ValueError when a batch size repeats, because the knee of two runs mixed together is
    meaningless: analyse one run at a time.
    """
    ok = points[points["status"] == "ok"].sort_values("batch_size").reset_index(drop=True)
    repeated = ok["batch_size"][ok["batch_size"].duplicated()].tolist()
    if repeated:
        raise ValueError(f"batch size(s) {sorted(set(repeated))} appear more than once: analyse one run at a time")
    ok = ok.assign(log2_batch=np.log2(ok["batch_size"].astype(float)))
    return ok


def excluded_notes(points: pd.DataFrame) -> list[str]:
    """One note per OOM or error point: it is shown but left out of every fit."""
    notes = []
    for row in points[points["status"] != "ok"].sort_values("batch_size").itertuples():
        if row.status == "oom":
            notes.append(f"Batch {row.batch_size} ran out of memory; it is shown but excluded from the fits.")
        else:
            error = getattr(row, "error", None)
            detail = f": {error}" if isinstance(error, str) and error else ""
            notes.append(f"Batch {row.batch_size} failed ({row.status}{detail}); it is excluded from the fits.")
    return notes


def tok_s(value: float) -> str:
    """Throughput as the sentences print it ("2 310 tok/s")."""
    return f"{num(value)} tok/s"
