"""The Explain chapter on two engines on the same model (fast vs hf-generate): decode step ratio and GPU
busy-time at the smallest shared batch."""
from __future__ import annotations

from typing import Any

import pandas as pd

from batchscope.explain import charts
from batchscope.explain.step import Step
from batchscope.explain.words import cancelled_after, measured, run_name, times, value
from batchscope.units import ms, pct_value, tok_s

def contrast(run_a: dict[str, Any], table_a: pd.DataFrame, run_b: dict[str, Any], table_b: pd.DataFrame
             ) -> Step | None:
    """Two engines on the same model: decode step ratio and GPU busy-time at the smallest shared batch.

    None when the two runs share no batch size with a measured decode step (nothing to compare).
    """
    steps_a, steps_b = measured(table_a, "decode_step_ms"), measured(table_b, "decode_step_ms")
    shared = sorted(set(steps_a["batch_size"].astype(int)) & set(steps_b["batch_size"].astype(int)))
    if not shared:
        return None
    b = shared[0]
    label_a, label_b = engine_label(run_a, run_b), engine_label(run_b, run_a)
    point_a = steps_a[steps_a["batch_size"] == b].iloc[0]
    point_b = steps_b[steps_b["batch_size"] == b].iloc[0]
    slow, quick = ((label_a, point_a), (label_b, point_b))
    if float(point_b["decode_step_ms"]) > float(point_a["decode_step_ms"]):
        slow, quick = quick, slow
    model = run_a.get("model_name") or (run_a.get("model") or {}).get("name") or "model"
    ratio = float(slow[1]["decode_step_ms"]) / float(quick[1]["decode_step_ms"])
    short = "".join(f"; {run_name(run)} was cut short, cancelled after {done}"
                    for run, table in ((run_a, table_a), (run_b, table_b))
                    if (done := cancelled_after(run, table)) is not None)
    unsteady = unsteady_words(steps_a if slow[0] == label_a else steps_b, b)
    first = (f"At batch {b}, the smallest both ran, a {slow[0]} decode step takes {ms(slow[1]['decode_step_ms'])} "
             f"against {quick[0]}'s {ms(quick[1]['decode_step_ms'])}: {times(ratio)} as long for the same {model} "
             f"weights{short}{unsteady}.")
    chart = charts.contrast_chart({label_a: table_a, label_b: table_b})
    return Step("contrast", f"{label_a} vs {label_b} on the same model: engine overhead and the knee", chart,
                (first, overhead_sentence(slow, quick, b, {label_a: table_a, label_b: table_b})))


def unsteady_words(steps: pd.DataFrame, b: int) -> str:
    """A clause when a larger batch's decode step is under half batch b's: more rows cannot make the GPU's
    work shorter, so something beside the batch size sets this engine's step, and the ratio is not its own."""
    base = float(steps.loc[steps["batch_size"] == b, "decode_step_ms"].iloc[0])
    larger = steps[steps["batch_size"] > b]
    if larger.empty:
        return ""
    low = larger.loc[larger["decode_step_ms"].idxmin()]
    if float(low["decode_step_ms"]) >= base / 2:
        return ""
    return (f"; but its step is not set by the batch size: {ms(low['decode_step_ms'])} at batch "
            f"{int(low['batch_size'])}, under half of batch {b}'s, so the ratio changes within the run")


def overhead_sentence(slow: tuple[str, pd.Series], quick: tuple[str, pd.Series], b: int,
                      tables: dict[str, pd.DataFrame]) -> str:
    """The slower engine's GPU busy-time at the shared batch, and how far its throughput keeps climbing."""
    busy_slow, busy_quick = value(slow[1], "gpu_util_pct"), value(quick[1], "gpu_util_pct")
    if busy_slow is None:
        return (f"{slow[0]} recorded no GPU utilisation at batch {b}, so whether its own overhead leaves the GPU "
                f"idle cannot be shown.")
    other = f" ({quick[0]}: {pct_value(busy_quick)})" if busy_quick is not None else ""
    peak = measured(tables[slow[0]], "output_tokens_per_s")
    climbs = ""
    top = peak.loc[peak["output_tokens_per_s"].idxmax()] if not peak.empty else None
    if top is not None and int(top["batch_size"]) > b:
        climbs = (f", so its throughput keeps climbing until batch {int(top['batch_size'])} "
                  f"({tok_s(top['output_tokens_per_s'])}) as rows share that fixed per-step cost")
    if busy_quick is not None and busy_slow >= busy_quick:
        return (f"There {slow[0]} keeps the GPU busy {pct_value(busy_slow)} of the time{other}, so its slower step "
                f"is spent in slower kernels rather than idle gaps.")
    return (f"There {slow[0]} keeps the GPU busy only {pct_value(busy_slow)} of the time{other}: its own per-step "
            f"overhead, not the GPU, sets the pace{climbs}, which hides the knee the GPU alone would show.")


def engine_label(run: dict[str, Any], other: dict[str, Any]) -> str:
    """The engine's name, with the run's name when both runs use the same engine."""
    engine = run.get("engine") or "engine"
    return engine if engine != other.get("engine") else f"{engine} ({run_name(run)})"