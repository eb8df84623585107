"""The wording and number helpers every Explain chapter shares: a run's measured points by batch, a
point's value, how far a cancelled run got, padding and OOM words, ratios and lists."""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from batchscope.analysis.marker import pct

def measured(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """The ok points with a value in `column`, by batch size, that column as float."""
    if column not in table or "batch_size" not in table:
        return pd.DataFrame(columns=["batch_size", column])
    ok = table[table["status"] == "ok"] if "status" in table else table
    ok = ok.assign(**{column: pd.to_numeric(ok[column], errors="coerce").astype(float)})
    return ok.dropna(subset=[column]).sort_values("batch_size").reset_index(drop=True)


PADDING_OF_NOTE = 0.10  # below this share padding does not explain a fall in throughput


def value(row: pd.Series, column: str) -> float | None:
    """A point's number, or None when absent or missing (NaN and pandas' NA alike)."""
    raw = row.get(column)
    if raw is None or raw is pd.NA:
        return None
    try:
        number = float(raw)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def cancelled_after(run: dict[str, Any], table: pd.DataFrame) -> str | None:
    """`2 batch sizes`: how far a cancelled run got, so no sentence passes it off as whole; None otherwise."""
    if run.get("state") != "cancelled":
        return None
    done = len(measured(table, "output_tokens_per_s"))
    return f"{done} batch size{'s' if done != 1 else ''}"


def run_name(run: dict[str, Any]) -> str:
    """What a sentence calls a run: the name its owner gave it (a room never reads a run id), else its id."""
    return str(run.get("name") or run.get("run_id"))


def cut_short(run: dict[str, Any], table: pd.DataFrame) -> str:
    """` (cut short: cancelled after 2 batch sizes)` after a cancelled run's name; empty otherwise."""
    done = cancelled_after(run, table)
    return f" (cut short: cancelled after {done})" if done is not None else ""


def not_ok_words(table: pd.DataFrame) -> str:
    """Why there is no curve: which batches ran out of memory or failed, or that none finished."""
    if "status" not in table or table.empty:
        return "No point has been measured yet."
    words = []
    for status, verb in (("oom", "ran out of memory"), ("error", "failed")):
        batches = sorted(int(b) for b in table.loc[table["status"] == status, "batch_size"])
        if batches:
            words.append(f"batch {', '.join(map(str, batches))} {verb}")
    return ("; ".join(words).capitalize() + ".") if words else "No point has finished yet."


def padding_words(point: pd.Series) -> str:
    """Why a static batch can get slower, in the point's own numbers: its rows pad to the longest prompt
    and keep decoding until the longest output is done. Empty when the run recorded no padding of note."""
    prefill, decode = value(point, "prefill_padding_waste"), value(point, "decode_padding_waste")
    parts = [f"{pct(share)} of {what}" for share, what in (
                 (decode, "the decode rows it runs belong to requests already finished"),
                 (prefill, "its prefill tokens are padding up to the longest prompt"))
             if share is not None and share >= PADDING_OF_NOTE]
    return f"; there {' and '.join(parts)}" if parts else ""


def oom_past(table: pd.DataFrame, batch: int) -> int | None:
    """The smallest batch above `batch` that ran out of memory, or None."""
    if "status" not in table:
        return None
    ooms = [int(b) for b in table.loc[table["status"] == "oom", "batch_size"] if int(b) > batch]
    return min(ooms) if ooms else None


def doubling_gain(low: pd.Series, high: pd.Series) -> float:
    """Throughput gain from one point to the next, per doubling of the batch (as the plateau rule reads it)."""
    doublings = math.log2(float(high["batch_size"]) / float(low["batch_size"]))
    if doublings <= 0:  # points that share a batch size (a continuous sweep along another axis)
        return 0.0
    return (float(high["output_tokens_per_s"]) / float(low["output_tokens_per_s"])) ** (1.0 / doublings) - 1.0


def roofline_share(point: pd.Series) -> str:
    share = value(point, "roofline_pct")
    return "n/a" if share is None else pct(share / 100, 0 if share >= 10 else 1)


def times(ratio: float) -> str:
    """A ratio as "4.0×" (one decimal below 10, none above)."""
    return f"{ratio:.1f}×" if ratio < 10 else f"{ratio:.0f}×"


def moves(start: float, end: float) -> str:
    return "grows" if end > start * 1.05 else "falls" if end < start / 1.05 else "stays about the same,"


def with_clause(sentence: str, clause: str) -> str:
    """`sentence` with `clause` added before its full stop."""
    return f"{sentence[:-1]}; {clause}."


def listed(parts: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"