"""The Explain page's choices: which run opens by default, which run it is contrasted with, the SLO range."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from batchscope.analysis import SLO
from batchscope.explain import Step, contrast, explain_steps, measured
from batchscope.ui.run_view import RunData

OTHER_ENGINE = {"fast": "hf-generate", "hf-generate": "fast"}
LENGTH_KEYS = ("prompt_len", "output_len")


def walk(data: RunData, runs: pd.DataFrame, load: Callable[[str], RunData | None],
         spec_of: Callable[[str], dict | None], slo: SLO | None) -> list[Step]:
    """The whole story for one run, in the order it is told: the run's own steps, then the steps other
    stored runs make possible (the other engine on the same model). `load` reads a run analysed without SLO."""
    steps = explain_steps(data.run, data.table, data.analysis, data.split, slo)
    partner_id = partner_run(data.run, runs, spec_of)
    partner = load(partner_id) if partner_id else None
    if partner is not None and partner.analysis is not None:
        extra = contrast(data.run, data.table, partner.run, partner.table)
        if extra is not None:
            steps.append(extra)
    return steps


def default_run(runs: pd.DataFrame) -> str | None:
    """A demo `fast` run with the most ok points (it tells the fullest story), else the newest run."""
    if runs.empty:
        return None
    demo = runs[(runs["demo"].fillna(False).astype(bool)) & (runs["engine"] == "fast") & (runs["points_ok"] > 0)]
    if not demo.empty:
        return str(demo.sort_values("points_ok", ascending=False, kind="stable").iloc[0]["run_id"])
    return str(runs.iloc[0]["run_id"])


def partner_run(run: dict[str, Any], runs: pd.DataFrame, spec_of: Callable[[str], dict | None]) -> str | None:
    """The other engine's static run of the same model and dtype, preferring the same lengths, then demo
    runs, then more ok points; None when there is none (or the engine has no counterpart)."""
    other = OTHER_ENGINE.get(str(run.get("engine")))
    if other is None or runs.empty:
        return None
    same = runs[(runs["engine"] == other) & (runs["model"] == run.get("model_name")) & (runs["dtype"] == run.get("dtype"))
                & (runs["points_ok"] > 0)]
    lengths = {k: (run.get("spec") or {}).get(k) for k in LENGTH_KEYS}

    def rank(row: pd.Series) -> tuple[bool, bool, int]:
        spec = spec_of(str(row["run_id"])) or {}
        return ({k: spec.get(k) for k in LENGTH_KEYS} == lengths, bool(row["demo"]), int(row["points_ok"]))

    static = [row for row in same.to_dict("records")
              if (spec_of(str(row["run_id"])) or {}).get("mode", "static") == "static"]  # same axis: batch size
    ranked = sorted(static, key=lambda row: rank(pd.Series(row)), reverse=True)
    return str(ranked[0]["run_id"]) if ranked else None


def slo_range(table: pd.DataFrame, column: str) -> tuple[list[float], float] | None:
    """(choices, start) for the SLO control: round limits (500 ms, not 449) from below the run's fastest
    latency to above its slowest, so a presenter can pick the number a room thinks in; the start is the
    choice nearest the middle (on a log scale), so the first sentence already splits the batches.
    None when the column is empty."""
    values = measured(table, column)[column] if column in table else pd.Series(dtype=float)
    values = values[values > 0]
    if values.empty:
        return None
    lo, hi = float(values.min()), float(values.max())
    choices = nice_values(lo * 0.8, hi * 1.2)
    middle = math.sqrt(lo * hi)
    return choices, min(choices, key=lambda c: abs(math.log(c / middle)))


# Round mantissas, coarse to fine: the coarsest ladder that still gives a few choices is used.
LADDERS = ((1.0, 2.0, 2.5, 5.0), (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0),
           tuple(round(1 + i / 10, 1) for i in range(90)))
MIN_CHOICES = 5


def nice_values(low: float, high: float) -> list[float]:
    """Round numbers from the largest at or below `low` to the smallest at or above `high` (1-2-2.5-5
    per decade, finer ladders when the range is too narrow to give MIN_CHOICES of them)."""
    for ladder in LADDERS:
        values = ladder_values(nice_floor(low, ladder), nice_ceil(high, ladder), ladder)
        if len(values) >= MIN_CHOICES:
            break
    return values


def ladder_values(low: float, high: float, ladder: tuple[float, ...]) -> list[float]:
    """Every ladder value from `low` to `high`, both included."""
    values, decade = [], 10.0 ** math.floor(math.log10(low))
    while decade <= high:
        values += [round(m * decade, 12) for m in ladder if low <= round(m * decade, 12) <= high]
        decade *= 10
    return values


def nice_floor(x: float, ladder: tuple[float, ...] = LADDERS[0]) -> float:
    """The largest ladder value at or below x (x > 0)."""
    decade = 10.0 ** math.floor(math.log10(x))
    below = [round(m * decade, 12) for m in ladder if round(m * decade, 12) <= x * (1 + 1e-12)]
    return below[-1] if below else round(ladder[-1] * decade / 10, 12)


def nice_ceil(x: float, ladder: tuple[float, ...] = LADDERS[0]) -> float:
    """The smallest ladder value at or above x (x > 0)."""
    decade = 10.0 ** math.floor(math.log10(x))
    above = [round(m * decade, 12) for m in ladder if round(m * decade, 12) >= x * (1 - 1e-12)]
    return above[0] if above else round(10 * decade, 12)
