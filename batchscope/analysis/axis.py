"""What a run's points vary along, so the knee rules, sentences and charts name it right.

A static sweep varies the batch size. A continuous sweep varies `max_num_seqs`, the number of
concurrent clients, or the arrival rate (its `sweep_axis` and `sweep_value` columns). Every rule reads
the column `x` that `sweep_x` derives, on a log2 scale, whatever the axis.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from batchscope.analysis.marker import num


@dataclass(frozen=True)
class SweepAxis:
    """One kind of x axis: how a value on it reads in a sentence and in a chart title."""

    key: str
    noun: str
    larger: str  # "larger batches": what a sentence suggests trying when throughput still rises
    unit: str = ""

    @property
    def is_batch_limit(self) -> bool:
        """True when x is a number of rows decoded together (roofline and ridge batch apply)."""
        return self.key != "arrival_rate"

    @property
    def title(self) -> str:
        name = "batch size" if self.key == "batch_size" else self.noun
        return f"{name}{f' ({self.unit}, log2)' if self.unit else ' (log2)'}"

    @property
    def some(self) -> str:
        """ "batch(es)", "arrival rate value(s)": a count-agnostic plural for notes."""
        return "batch(es)" if self.key == "batch_size" else f"{self.noun} value(s)"

    def value(self, x: float) -> str:
        """`64`, or `4.5 req/s`."""
        if self.unit:
            return f"{num(float(x))} {self.unit}"
        return str(int(x))

    def at(self, x: float) -> str:
        """`batch 64`, `max_num_seqs 64`, `arrival rate 4 req/s`."""
        return f"{self.noun} {self.value(x)}"

    def at_start(self, x: float) -> str:
        """`at` for the start of a sentence: a word is capitalised, an identifier left as written."""
        text = self.at(x)
        return text if "_" in self.noun else text[0].upper() + text[1:]


BATCH = SweepAxis("batch_size", "batch", "larger batches")
AXES = {axis.key: axis for axis in (
    BATCH,
    SweepAxis("max_num_seqs", "max_num_seqs", "a larger max_num_seqs"),
    SweepAxis("concurrency", "concurrency", "more concurrent clients"),
    SweepAxis("arrival_rate", "arrival rate", "higher arrival rates", "req/s"),
)}


def sweep_x(points: pd.DataFrame) -> pd.Series:
    """Per point, its place on the x axis: `sweep_value` for continuous points, else the batch size."""
    batch = points["batch_size"].astype(float)
    if "sweep_value" not in points:
        return batch
    return points["sweep_value"].astype(float).fillna(batch)


def axes_of(points: pd.DataFrame) -> list[SweepAxis]:
    """The axes a table's points lie on (one for a run, several for an overlay), static first."""
    keys = set(points["sweep_axis"].dropna()) if "sweep_axis" in points else set()
    if "sweep_axis" not in points or points["sweep_axis"].isna().any() or not keys:
        keys.add("batch_size")
    return [axis for key, axis in AXES.items() if key in keys]


def axis_of(points: pd.DataFrame) -> SweepAxis:
    """The single axis of one run's points; ValueError when they mix axes (analyse one run at a time)."""
    found = axes_of(points)
    if len(found) > 1:
        raise ValueError(f"these points vary along {' and '.join(a.noun for a in found)}: analyse one run at a time")
    return found[0]
