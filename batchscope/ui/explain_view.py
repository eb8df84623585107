"""The Explain page's choices: which run opens by default, the story told about it (its own steps, then the
chapters other stored runs allow), which run it is contrasted with, the SLO range."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from batchscope.analysis import SLO
from batchscope.explain import partners
from batchscope.explain.continuous import continuous_chapter
from batchscope.explain.engines import contrast
from batchscope.explain.parallel import parallel_chapter
from batchscope.explain.quantised import quant_chapter
from batchscope.explain.step import Step
from batchscope.explain.throughput import throughput_shape
from batchscope.explain.walk import explain_steps
from batchscope.explain.words import measured
from batchscope.ui.run_view import RunData
from runners.spec.registry import engine_shows_gpu_knee, sweeps_batch_size

OTHER_ENGINE = {"fast": "hf-generate", "hf-generate": "fast"}
MAKES_THE_CASE = ("peak", "plateau", "levels")  # throughput shapes that stop paying before the end
FEW_POINTS = 2  # a partner with this many ok points or fewer is used only when no fuller one exists


def walk(data: RunData, runs: pd.DataFrame, load: Callable[[str], RunData | None],
         spec_of: Callable[[str], dict | None], slo: SLO | None) -> list[Step]:
    """The whole story for one run, in the order it is told: the run's own steps, then the steps other
    stored runs make possible (the other engine on the same model; continuous batching, quantised weights
    and two GPUs on the same model and workload). `load` reads a run analysed without SLO."""
    steps = explain_steps(data.run, data.table, data.analysis, data.split, slo)
    told = {rid: found for rid in related(data.run, runs, spec_of)
            if (found := load(rid)) is not None and found.analysis is not None}

    def table_of(rid: str) -> pd.DataFrame | None:
        found = told.get(rid) or load(rid)
        return found.table if found is not None and found.analysis is not None else None

    partner_id = partner_run(data.run, data.table, runs, spec_of, table_of)
    partner = load(partner_id) if partner_id else None
    if partner is not None and partner.analysis is not None:
        extra = contrast(data.run, data.table, partner.run, partner.table)
        if extra is not None:
            steps.append(extra)
    if data.analysis is None or data.analysis.axis.key != "batch_size":
        return steps
    own = (data.run, data.analysis)

    def one(rid: str | None) -> tuple[dict[str, Any], Any] | None:
        return (told[rid].run, told[rid].analysis) if rid in told else None

    tp, replicas = partners.parallel_partners(data.run, runs, spec_of)
    chapters = (
        continuous_chapter(own, [t for rid in partners.continuous_partners(data.run, runs, spec_of) if (t := one(rid))], slo),
        quant_chapter(own, [t for rid in partners.quantised_partners(data.run, runs, spec_of) if (t := one(rid))]),
        parallel_chapter(own, one(tp), one(replicas)),
    )
    return steps + [chapter for chapter in chapters if chapter is not None]


def related(run: dict[str, Any], runs: pd.DataFrame, spec_of: Callable[[str], dict | None]) -> list[str]:
    """Every run a chapter could use: one read per run, however many chapters use it."""
    tp, replicas = partners.parallel_partners(run, runs, spec_of)
    return (partners.continuous_partners(run, runs, spec_of) + partners.quantised_partners(run, runs, spec_of)
            + [rid for rid in (tp, replicas) if rid])


def default_run(runs: pd.DataFrame, load: Callable[[str], RunData | None]) -> str | None:
    """The run the Explain page opens with, chosen so the default walk makes the case that bigger batches
    stop paying: a finished demo static sweep whose throughput peaks before its largest batch or plateaus, on the
    fast engine (hf-generate's per-step overhead hides the GPU's own knee), of the larger model (the set's
    flagship, whose continuous, quantised and parallel runs give the walk its chapters), with the most ok points,
    then full-precision weights on one GPU. Else the demo static sweep with the most ok points, else the newest
    run."""
    if runs.empty:
        return None
    demo = runs[runs["demo"].fillna(False).astype(bool) & (runs["points_ok"] > 0) & (runs["state"] == "done")]
    ranked = []
    for run_id in demo["run_id"]:
        data = load(str(run_id))
        if data is None or data.analysis is None or data.analysis.axis.key != "batch_size":
            continue
        model = data.run.get("model") or {}
        ranked.append((throughput_shape(data.table, data.analysis) in MAKES_THE_CASE, engine_shows_gpu_knee(data.run.get("engine")),
                       int(model.get("params") or 0), len(measured(data.table, "output_tokens_per_s")),
                       not partners.is_quantised(data.run.get("dtype")), partners.gpus(data.run.get("spec")) == (1, 1),
                       str(run_id)))
    if ranked:
        return max(ranked)[-1]
    return str(runs.iloc[0]["run_id"])


def partner_run(run: dict[str, Any], table: pd.DataFrame, runs: pd.DataFrame, spec_of: Callable[[str], dict | None],
                table_of: Callable[[str], pd.DataFrame | None]) -> str | None:
    """The other engine's static run of the same model and dtype to contrast with: never a one- or two-point
    run when a fuller one exists; then most batch sizes shared with a measured decode step, the same request
    lengths, a finished (not cancelled) run, more ok points. None when there is none."""
    other = OTHER_ENGINE.get(str(run.get("engine")))
    if other is None or runs.empty:
        return None
    same = runs[(runs["engine"] == other) & (runs["model"] == run.get("model_name")) & (runs["dtype"] == run.get("dtype"))
                & (runs["points_ok"] > 0)]
    static = [row for row in same.to_dict("records")
              if sweeps_batch_size((spec_of(str(row["run_id"])) or {}).get("mode"))]  # same axis: batch size
    if any(int(row["points_ok"]) > FEW_POINTS for row in static):
        static = [row for row in static if int(row["points_ok"]) > FEW_POINTS]
    own = set(measured(table, "decode_step_ms")["batch_size"].astype(int))

    def rank(row: dict[str, Any]) -> tuple[int, bool, bool, int]:
        theirs = table_of(str(row["run_id"]))
        shared = own & set(measured(theirs, "decode_step_ms")["batch_size"].astype(int)) if theirs is not None else set()
        return (len(shared), partners.lengths(spec_of(str(row["run_id"]))) == partners.lengths(run.get("spec")),
                row.get("state") == "done", int(row["points_ok"]))

    ranked = sorted(static, key=rank, reverse=True)
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
