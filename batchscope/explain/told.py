"""A run as a cross-run chapter tells it (`Told`: its record and its analysis), and what every chapter
reads of it: its name, its best point, its best point under an SLO, a point on its own axis."""
from __future__ import annotations

from typing import Any

import pandas as pd

from batchscope.analysis import SLO, Analysis
from batchscope.explain.words import cut_short, measured, run_name

Told = tuple[dict[str, Any], Analysis]


def name(told: Told) -> str:
    """The run's name, said to be cut short when it was cancelled."""
    run, analysis = told
    return f"{run_name(run)}{cut_short(run, analysis.table)}"


def best(table: pd.DataFrame) -> pd.Series | None:
    """The ok point with the highest throughput."""
    curve = measured(table, "output_tokens_per_s")
    return curve.loc[curve["output_tokens_per_s"].idxmax()] if not curve.empty else None


def slo_point(told: Told, slo: SLO) -> pd.Series | None:
    """The point with the most throughput among those whose latency meets the SLO: the run's best under it."""
    curve = measured(told[1].table, "output_tokens_per_s")
    meets = curve[pd.to_numeric(curve[slo.column], errors="coerce") <= slo.ms] if slo.column in curve else curve[:0]
    return meets.loc[meets["output_tokens_per_s"].idxmax()] if not meets.empty else None


def at(told: Told, point: pd.Series) -> str:
    """`batch 16`, `max_num_seqs 32`, `arrival rate 8 req/s`: the point on its run's own axis."""
    return told[1].axis.at(point["x"] if "x" in point else point["batch_size"])