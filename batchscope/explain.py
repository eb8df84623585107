"""The Explain page's story: six steps through one run, each one chart and two sentences.

Every sentence is built from the run's own numbers (its points table and analysis), so another run
tells its own story; where a number was never recorded the sentence says so instead of guessing.
No streamlit here: the page only lays the steps out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import altair as alt
import pandas as pd

from batchscope import explain_charts
from batchscope.analysis import SLO, Analysis
from batchscope.analysis.curve import tok_s
from batchscope.analysis.marker import num, pct
from batchscope.analysis.noise import describe_spread, spreads_overlap

FAR_BATCHES = 100  # a capacity line this many times the largest batch away is "far"
BUSY_PCT = 90.0  # NVML busy-time at or above this counts as "saturated"
KiB, MiB, GiB = 1024, 1024**2, 1024**3
GPM_COUNTERS = (("sm_util_pct", "the SMs are active"), ("tensor_active_pct", "the tensor cores"),
                ("dram_bw_util_pct", "DRAM bandwidth is"))
GPM_SUFFIX = {"sm_util_pct": " of the time", "tensor_active_pct": "", "dram_bw_util_pct": " used"}


@dataclass(frozen=True)
class Step:
    """One step of the walk-through: a chart and the two sentences that read it."""

    key: str
    title: str
    chart: alt.TopLevelMixin
    sentences: tuple[str, str]


def explain_steps(run: dict[str, Any], table: pd.DataFrame, analysis: Analysis, split: pd.DataFrame,
                  slo: SLO | None) -> list[Step]:
    """The six steps for one run; `analysis` must have been made with `slo` (step 6 reads its markers).
    Latency is shown at the SLO's percentile (P95 without an SLO)."""
    percentile = slo.percentile if slo is not None else 95
    return [
        Step("throughput", "Throughput vs batch size: where the returns diminish",
             explain_charts.throughput_chart(table, analysis), throughput_sentences(table, analysis)),
        Step("latency", "Per-request latency: time to first token and inter-token latency",
             explain_charts.latency_chart(table, percentile), latency_sentences(table, percentile)),
        Step("utilisation", "Utilisation: GPU busy-time vs throughput",
             explain_charts.utilisation_chart(table), utilisation_sentences(run, table)),
        Step("memory", "Memory: fixed weights, a KV cache that grows with the batch",
             explain_charts.memory_chart(table, split), memory_sentences(table, split)),
        Step("roofline", "The roofline: memory- or compute-bound, and how close to the floor",
             explain_charts.roofline_chart(table, analysis.ridge_batch), roofline_sentences(run, table, analysis)),
        Step("working_point", "The working point under a latency SLO",
             explain_charts.working_point_chart(table, analysis, slo), working_point_sentences(table, analysis, slo)),
    ]


# ---- sentence builders, one per step ----

def throughput_sentences(table: pd.DataFrame, analysis: Analysis | None) -> tuple[str, str]:
    """From the first to the best batch (and by how much), then where the returns stop."""
    curve = measured(table, "output_tokens_per_s")
    if curve.empty:
        return ("No batch size finished with a throughput measurement, so there is no curve to explain yet.",
                not_ok_words(table))
    first, best, last = curve.iloc[0], curve.loc[curve["output_tokens_per_s"].idxmax()], curve.iloc[-1]
    b0, t0 = int(first["batch_size"]), float(first["output_tokens_per_s"])
    bb, tb = int(best["batch_size"]), float(best["output_tokens_per_s"])
    if len(curve) == 1:
        return (f"Only batch {b0} finished ({tok_s(t0)}), so there is no rise to compare yet.",
                "Measure at least two batch sizes to see how throughput answers a bigger batch.")
    if bb == b0:
        opening = f"Throughput is highest at the smallest batch, {b0} ({tok_s(t0)}): no larger batch added any."
    else:
        opening = (f"Throughput rises from {tok_s(t0)} at batch {b0} to {tok_s(tb)} at batch {bb}: "
                   f"{times(tb / t0)} the throughput for a {bb / b0:g}× larger batch.")
    plateau = analysis.plateau if analysis is not None else None
    after = curve[curve["batch_size"] > int(plateau.x)] if plateau is not None else curve.iloc[0:0]
    if plateau is not None and not after.empty:
        here = curve[curve["batch_size"] == int(plateau.x)].iloc[0]
        nxt = after.iloc[0]
        gain = doubling_gain(here, nxt)
        change = f"adds only {pct(gain, 1)}" if gain >= 0 else f"loses {pct(-gain, 1)}"
        return opening, (f"Past batch {int(plateau.x)} it plateaus: going on to batch {int(nxt['batch_size'])} "
                         f"{change} per doubling ({tok_s(here['output_tokens_per_s'])} → "
                         f"{tok_s(nxt['output_tokens_per_s'])}), under the {pct(analysis.plateau_gain)} a doubling "
                         f"must add to count as still rising.")
    if int(last["batch_size"]) != bb:
        drop = 1 - float(last["output_tokens_per_s"]) / tb
        if spreads_overlap(best, last):  # the Run page's noise rule: no fall called inside the repeats' spread
            return opening, (f"Past batch {bb} it stays level within the noise: batch {int(last['batch_size'])} "
                             f"gives {tok_s(last['output_tokens_per_s'])}, {pct(drop, 1)} less, but their repeats "
                             f"overlap ({describe_spread(best)} against {describe_spread(last)}).")
        return opening, (f"Past its peak at batch {bb} it falls: batch {int(last['batch_size'])} gives "
                         f"{tok_s(last['output_tokens_per_s'])}, {pct(drop, 1)} less{padding_words(last)}.")
    first_gain = doubling_gain(curve.iloc[0], curve.iloc[1])
    last_gain = doubling_gain(curve.iloc[-2], curve.iloc[-1])
    last_step = f"{int(curve.iloc[-2]['batch_size'])} → {int(last['batch_size'])}"
    ceiling = oom_past(table, int(last["batch_size"]))
    beyond = (f"; batch {ceiling} ran out of memory, so this is as far as the device goes" if ceiling is not None
              else "")
    if len(curve) == 2:
        more = beyond or "; more batch sizes would show where the returns fall off"
        return opening, f"The one step measured, {last_step}, added {pct(last_gain, 1)} per doubling{more}."
    first_step = f"{b0} → {int(curve.iloc[1]['batch_size'])}"
    if last_gain < first_gain:
        return opening, (f"Each doubling pays less: the first step ({first_step}) added {pct(first_gain, 1)} per "
                         f"doubling, the last ({last_step}) only {pct(last_gain, 1)}{beyond}.")
    where = beyond or ", so the plateau lies beyond the largest batch measured"
    return opening, (f"It has not flattened yet: the last step ({last_step}) still added {pct(last_gain, 1)} per "
                     f"doubling (the first, {first_step}, {pct(first_gain, 1)}){where}.")


def latency_sentences(table: pd.DataFrame, percentile: int = 95) -> tuple[str, str]:
    """TTFT and ITL at the chosen percentile at the smallest and largest batch, and the token rate a user
    at that percentile sees (1000 / ITL)."""
    ttft_col, itl_col, p = f"ttft_ms_p{percentile}", f"itl_ms_p{percentile}", f"P{percentile}"
    ttft = measured(table, ttft_col)
    if ttft.empty:
        first = "This run recorded no time to first token (TTFT), so its growth with the batch cannot be shown."
    elif len(ttft) == 1:
        first = f"{p} time to first token (TTFT) is {ms(ttft.iloc[0][ttft_col])} at batch " \
                f"{int(ttft.iloc[0]['batch_size'])}, the only finished batch."
    else:
        a, z = ttft.iloc[0], ttft.iloc[-1]
        va, vz = float(a[ttft_col]), float(z[ttft_col])
        first = (f"{p} time to first token (TTFT) {moves(va, vz)} from {ms(va)} at batch {int(a['batch_size'])} to "
                 f"{ms(vz)} at batch {int(z['batch_size'])}"
                 + (f" ({times(vz / va)}): a request's first token waits for the prefill of the whole batch."
                    if vz > va else "."))
    itl = measured(table, itl_col)
    if itl.empty:
        return first, "This run recorded no inter-token latency (ITL), so the token rate each user sees is unknown."
    a, z = itl.iloc[0], itl.iloc[-1]
    va, vz = float(a[itl_col]), float(z[itl_col])
    if len(itl) == 1:
        return first, (f"{p} inter-token latency (ITL) is {ms(va)} at batch {int(a['batch_size'])}: each user "
                       f"receives about {num(1000 / va)} tokens/s (1000 / ITL).")
    return first, (f"{p} inter-token latency (ITL) {moves(va, vz)} from {ms(va)} at batch {int(a['batch_size'])} to "
                   f"{ms(vz)} at batch {int(z['batch_size'])}, so each user's stream goes from about "
                   f"{num(1000 / va)} to {num(1000 / vz)} tokens/s (1000 / ITL).")


def utilisation_sentences(run: dict[str, Any], table: pd.DataFrame) -> tuple[str, str]:
    """Where NVML busy-time first reaches 90 % vs the best-throughput batch; what GPM says there."""
    busy = measured(table, "gpu_util_pct")
    if busy.empty:
        return cpu_sentences(run, table)
    curve = measured(table, "output_tokens_per_s")
    if curve.empty:
        top = busy.loc[busy["gpu_util_pct"].idxmax()]
        return (f"GPU busy-time (NVML) reaches {pct_value(top['gpu_util_pct'])} at batch {int(top['batch_size'])}, "
                f"but no batch recorded a throughput to compare it with.", not_ok_words(table))
    best = curve.loc[curve["output_tokens_per_s"].idxmax()]
    bb, tb = int(best["batch_size"]), float(best["output_tokens_per_s"])
    saturated = busy[busy["gpu_util_pct"] >= BUSY_PCT]
    if saturated.empty:
        top = busy.loc[busy["gpu_util_pct"].idxmax()]
        first = (f"GPU busy-time (NVML) never reaches {BUSY_PCT:.0f} %: its highest is "
                 f"{pct_value(top['gpu_util_pct'])} at batch {int(top['batch_size'])}, while throughput peaks at "
                 f"batch {bb} ({tok_s(tb)}).")
    else:
        sat = saturated.iloc[0]
        bs = int(sat["batch_size"])
        if bs < bb:
            at_sat = curve[curve["batch_size"] == bs]
            gain = (f", {times(tb / float(at_sat.iloc[0]['output_tokens_per_s']))} what batch {bs} gave"
                    if not at_sat.empty else "")
            first = (f"GPU busy-time (NVML) first reaches {BUSY_PCT:.0f} % at batch {bs} "
                     f"({pct_value(sat['gpu_util_pct'])}), yet throughput keeps rising until batch {bb} "
                     f"({tok_s(tb)}{gain}): busy-time only says some kernel was running, not how much of the GPU it used.")
        elif bs == bb:
            first = (f"GPU busy-time (NVML) reaches {BUSY_PCT:.0f} % at batch {bs} "
                     f"({pct_value(sat['gpu_util_pct'])}), the same batch where throughput peaks ({tok_s(tb)}).")
        else:
            first = (f"Throughput peaks at batch {bb} ({tok_s(tb)}) before GPU busy-time (NVML) reaches "
                     f"{BUSY_PCT:.0f} % at batch {bs} ({pct_value(sat['gpu_util_pct'])}).")
    return first, gpm_sentence(best)


def gpm_sentence(point: pd.Series) -> str:
    """What SM, tensor and DRAM activity (GPM) say at one point, or that they were not recorded."""
    b = int(point["batch_size"])
    found = {column: value(point, column) for column, _ in GPM_COUNTERS}
    found = {c: v for c, v in found.items() if v is not None}
    if not found:
        busy = value(point, "gpu_util_pct")
        reads = f"; there it reads {pct_value(busy)}" if busy is not None else ""
        return (f"This run has no GPM counters (SM, tensor-core and DRAM activity) at batch {b}, so NVML busy-time "
                f"is its only GPU signal{reads}.")
    parts = [f"{label} {pct_value(found[c])}{GPM_SUFFIX[c]}" for c, label in GPM_COUNTERS if c in found]
    listed = ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else parts[0]
    tensor, dram = found.get("tensor_active_pct"), found.get("dram_bw_util_pct")
    verdict = ""
    if tensor is not None and dram is not None and dram >= 2 * tensor:
        verdict = ": the GPU is mostly moving memory, not doing matrix math"
    elif tensor is not None and dram is not None and tensor >= 2 * dram:
        verdict = ": matrix math now outweighs memory traffic"
    return f"At batch {b}, where throughput is best, the GPM counters say {listed}{verdict}."


def cpu_sentences(run: dict[str, Any], table: pd.DataFrame) -> tuple[str, str]:
    """A run without GPU utilisation: say so, and list the CPU numbers it has instead."""
    device = run.get("gpu_name") or run.get("device") or "not recorded"
    first = (f"This run recorded no GPU utilisation (device: {device}), so there is no GPU busy-time to set "
             f"against throughput.")
    found = []
    cpu = measured(table, "cpu_pct")
    if not cpu.empty:
        a, z = cpu.iloc[0], cpu.iloc[-1]
        found.append(f"process CPU % of {pct_value(a['cpu_pct'])} at batch {int(a['batch_size'])}" if len(cpu) == 1
                     else f"process CPU % going from {pct_value(a['cpu_pct'])} at batch {int(a['batch_size'])} to "
                          f"{pct_value(z['cpu_pct'])} at batch {int(z['batch_size'])}")
    rss = measured(table, "rss_bytes_max")
    if not rss.empty:
        found.append(f"peak resident memory up to {size(rss['rss_bytes_max'].max())}")
    if not found:
        return first, "It recorded no CPU numbers either (process CPU %, peak resident memory), so this step has no data."
    return first, "What it has instead: " + " and ".join(found) + "."


def memory_sentences(table: pd.DataFrame, split: pd.DataFrame) -> tuple[str, str]:
    """Weights fixed and KV growing with active tokens; then capacity, headroom and the OOM point."""
    weights = measured(table, "mem_weights")
    kv = measured(table, "mem_kv_used")
    if weights.empty and kv.empty:
        first = "This run recorded no memory split (weights, KV cache), so where its memory goes is unknown."
    else:
        held = (f"The weights take {size(weights['mem_weights'].max())} at every batch size" if not weights.empty
                else "This run recorded no weight bytes")
        if kv.empty:
            first = f"{held}; the KV cache was not recorded."
        else:
            a, z = kv.iloc[0], kv.iloc[-1]
            if len(kv) == 1:
                first = (f"{held}; the KV cache holds {size(a['mem_kv_used'])} for {tokens(a)} at batch "
                         f"{int(a['batch_size'])}, the only finished batch.")
            else:
                first = (f"{held}, while the KV cache grows with the tokens in flight: {size(a['mem_kv_used'])} for "
                         f"{tokens(a)} at batch {int(a['batch_size'])}, {size(z['mem_kv_used'])} for {tokens(z)} "
                         f"at batch {int(z['batch_size'])}.")
    return first, capacity_sentence(table, split)


def capacity_sentence(table: pd.DataFrame, split: pd.DataFrame) -> str:
    """How much of the device the largest ok batch used, and the OOM point or where KV would fill it."""
    ok_split = split[split["status"] == "ok"] if "status" in split else split
    used = ok_split.dropna(subset=["bytes"]).groupby("batch_size")["bytes"].sum()
    capacity = measured(table, "mem_capacity")["mem_capacity"].max() if "mem_capacity" in table else math.nan
    ooms = sorted(int(b) for b in table.loc[table["status"] == "oom", "batch_size"]) if "status" in table else []
    if used.empty:
        oom_words = f"Batch {ooms[0]} ran out of memory, but" if ooms else "There is"
        return f"{oom_words} no memory measurement of a finished batch to set against the device's capacity."
    bl, ul = int(used.index.max()), float(used.iloc[-1])
    if math.isnan(capacity):
        of = f"{size(ul)} (the device capacity was not recorded)"
    else:
        share = pct(ul / capacity) if ul >= capacity / 100 else "under 1 %"
        of = f"{size(ul)} of the {size(capacity)} on the device ({share})"
    if ooms:
        return f"Batch {ooms[0]} ran out of memory; the largest batch that fit, {bl}, used {of}."
    kv_row = kv_per_row(table, bl)
    if math.isnan(capacity) or kv_row is None:
        return f"No batch ran out of memory; the largest, {bl}, used {of}."
    reach = bl + max(0.0, capacity - ul) / kv_row
    if reach > FAR_BATCHES * bl:
        return (f"No batch ran out of memory; the largest, {bl}, used {of}: at {size(kv_row)} of KV cache per "
                f"request the capacity line is far away (near batch {num(reach)}).")
    return (f"No batch ran out of memory; the largest, {bl}, used {of}, and at {size(kv_row)} of KV cache per "
            f"request the capacity line would be reached near batch {num(reach)}.")


def roofline_sentences(run: dict[str, Any], table: pd.DataFrame, analysis: Analysis | None) -> tuple[str, str]:
    """Measured decode step vs the roofline floor at both ends; memory- vs compute-bound and the ridge."""
    steps = measured(table, "decode_step_ms")
    if steps.empty:
        return ("This run recorded no decode step time, so there is nothing to set against the roofline.",
                "Memory- vs compute-bound needs a measured decode step, so it is not called for this run.")
    predicted = steps.dropna(subset=["predicted_step_ms"]) if "predicted_step_ms" in steps else steps.iloc[0:0]
    if predicted.empty:
        a, z = steps.iloc[0], steps.iloc[-1]
        return (f"This run has no roofline (its model facts or calibration are missing): only the measured decode "
                f"step is shown, {ms(a['decode_step_ms'])} at batch {int(a['batch_size'])} and "
                f"{ms(z['decode_step_ms'])} at batch {int(z['batch_size'])}.",
                "Memory- vs compute-bound needs the roofline, so it is not called for this run.")
    a, z = predicted.iloc[0], predicted.iloc[-1]
    ends = [f"{ms(p['decode_step_ms'])} at batch {int(p['batch_size'])} against a floor of "
            f"{ms(p['predicted_step_ms'])} ({roofline_share(p)} of roofline)" for p in (a, z)]
    first = (f"A decode step takes {ends[0]}." if len(predicted) == 1
             else f"A decode step takes {ends[0]}, and {ends[1]}.")
    return first, bound_sentence(run, predicted, analysis.ridge_batch if analysis is not None else None)


def bound_sentence(run: dict[str, Any], predicted: pd.DataFrame, ridge: float | None) -> str:
    """Which batches are memory- or compute-bound, why (weights read per step), and where the ridge lies."""
    bounds = predicted["bound"].astype(str).tolist()
    a, z = predicted.iloc[0], predicted.iloc[-1]
    weights = (run.get("model") or {}).get("weight_bytes")
    if set(bounds) == {"memory"}:
        reads = f"the {size(weights)} of weights" if weights else "all the weights"
        grows = (f", so the floor only grows from {ms(a['predicted_step_ms'])} to {ms(z['predicted_step_ms'])} over "
                 f"a {int(z['batch_size']) / int(a['batch_size']):g}× larger batch" if len(predicted) > 1 else "")
        head = f"Every measured batch is memory-bound: each step reads {reads} however many rows it serves{grows}"
    elif set(bounds) == {"compute"}:
        head = "Every measured batch is compute-bound: the matrix math, not reading the weights, sets the floor"
    else:
        first_compute = int(predicted.loc[predicted["bound"] == "compute", "batch_size"].min())
        head = f"Batches below {first_compute} are memory-bound and from {first_compute} on compute-bound"
    if ridge is None:
        return (head + "; there is no ridge: at this context length each added row's KV costs more memory time "
                       "than its compute, so no batch becomes compute-bound.")
    beyond = f", beyond the largest measured ({int(z['batch_size'])})" if ridge > float(z["batch_size"]) else ""
    return head + f"; the ridge, where compute time catches up with memory time, lies near batch {num(ridge)}{beyond}."


def working_point_sentences(table: pd.DataFrame, analysis: Analysis | None, slo: SLO | None) -> tuple[str, str]:
    """Which batches meet the SLO, then the working point and what it costs against the best throughput."""
    return slo_sentence(table, analysis, slo), working_point_sentence(table, analysis, slo)


def slo_sentence(table: pd.DataFrame, analysis: Analysis | None, slo: SLO | None) -> str:
    if slo is None:
        return "No latency SLO is set, so every batch is allowed on latency."
    curve = measured(table, slo.column)
    if curve.empty:
        return f"This run recorded no {slo.name} latency, so the {num(slo.ms)} ms SLO cannot be checked."
    meets = curve[slo.column] <= slo.ms
    first, last = curve.iloc[0], curve.iloc[-1]
    if not meets.any():
        return (f"No batch meets a {slo.name} SLO of {num(slo.ms)} ms: even batch {int(first['batch_size'])} "
                f"takes {ms(first[slo.column])}.")
    limit = int(analysis.slo_limit.x) if analysis is not None and analysis.slo_limit is not None \
        else int(curve.loc[meets, "batch_size"].max())
    here = curve[curve["batch_size"] == limit].iloc[0]
    beyond = curve[curve["batch_size"] > limit]
    if beyond.empty:
        return (f"Every measured batch meets a {slo.name} SLO of {num(slo.ms)} ms, up to batch "
                f"{int(last['batch_size'])} at {ms(last[slo.column])}.")
    nxt = beyond.iloc[0]
    return (f"Under a {slo.name} SLO of {num(slo.ms)} ms, batch {limit} is the largest that meets it "
            f"({ms(here[slo.column])}); batch {int(nxt['batch_size'])} takes {ms(nxt[slo.column])}.")


def working_point_sentence(table: pd.DataFrame, analysis: Analysis | None, slo: SLO | None) -> str:
    curve = measured(table, "output_tokens_per_s")
    marker = analysis.working_point if analysis is not None else None
    if curve.empty or marker is None:
        within = f" meets the {num(slo.ms)} ms {slo.name} SLO" if slo is not None else " finished"
        return f"So there is no working point: no batch at or before the plateau{within}."
    row = curve[curve["batch_size"] == int(marker.x)]
    if row.empty:
        return f"The working point is batch {int(marker.x)}, but its throughput was not recorded."
    best = curve.loc[curve["output_tokens_per_s"].idxmax()]
    t, tb = float(row.iloc[0]["output_tokens_per_s"]), float(best["output_tokens_per_s"])
    latency = ""
    if slo is not None and value(row.iloc[0], slo.column) is not None:
        latency = f" at {ms(row.iloc[0][slo.column])} {slo.name}"
    share = ("the best measured" if int(marker.x) == int(best["batch_size"])
             else f"{pct(t / tb)} of the best measured ({tok_s(tb)} at batch {int(best['batch_size'])})")
    plateau = int(analysis.plateau.x) if analysis.plateau is not None else None
    larger = curve[curve["batch_size"] > int(marker.x)]
    blocked = slo is not None and not larger.empty and (measured(larger, slo.column)[slo.column] > slo.ms).any()
    limited_by = ""
    if blocked and (plateau is None or plateau > int(marker.x)):
        limited_by = "; the SLO, not throughput, sets it"
    elif plateau == int(marker.x):
        limited_by = "; past it throughput stops paying"
    elif larger.empty:
        limited_by = "; it is the largest batch measured"
    return f"The working point is batch {int(marker.x)}: {tok_s(t)}{latency}, {share}{limited_by}."


# ---- fast vs hf-generate ----

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
    first = (f"At batch {b}, the smallest both ran, a {slow[0]} decode step takes {ms(slow[1]['decode_step_ms'])} "
             f"against {quick[0]}'s {ms(quick[1]['decode_step_ms'])}: {times(ratio)} as long for the same {model} "
             f"weights.")
    chart = explain_charts.contrast_chart({label_a: table_a, label_b: table_b})
    return Step("contrast", f"{label_a} vs {label_b} on the same model: engine overhead and the knee", chart,
                (first, overhead_sentence(slow, quick, b, {label_a: table_a, label_b: table_b})))


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
    """The engine's name, with the run id when both runs use the same engine."""
    engine = run.get("engine") or "engine"
    return engine if engine != other.get("engine") else f"{engine} ({run.get('run_id')})"


# ---- shared wording and number helpers ----

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
    return (float(high["output_tokens_per_s"]) / float(low["output_tokens_per_s"])) ** (1.0 / doublings) - 1.0


def kv_per_row(table: pd.DataFrame, batch: int) -> float | None:
    """KV bytes one request holds at `batch` (allocated, else used), None when not recorded."""
    for column in ("mem_kv_allocated", "mem_kv_used"):
        rows = measured(table, column)
        rows = rows[rows["batch_size"] == batch]
        if not rows.empty and float(rows.iloc[0][column]) > 0:
            return float(rows.iloc[0][column]) / batch
    return None


def roofline_share(point: pd.Series) -> str:
    share = value(point, "roofline_pct")
    return "n/a" if share is None else pct(share / 100, 0 if share >= 10 else 1)


def tokens(point: pd.Series) -> str:
    active = value(point, "active_tokens_mean")
    return "an unknown number of tokens" if active is None else f"{num(active)} tokens"


def times(ratio: float) -> str:
    """A ratio as "4.0×" (one decimal below 10, none above)."""
    return f"{ratio:.1f}×" if ratio < 10 else f"{ratio:.0f}×"


def moves(start: float, end: float) -> str:
    return "grows" if end > start * 1.05 else "falls" if end < start / 1.05 else "stays about the same,"


def ms(milliseconds: float) -> str:
    return f"{num(float(milliseconds))} ms"


def pct_value(percent: float | None) -> str:
    """A value already in percent ("98 %")."""
    return "n/a" if percent is None else f"{float(percent):.0f} %"


def size(n_bytes: float | None) -> str:
    """Bytes as "2.3 GiB", "19 MiB", "6 KiB"."""
    if n_bytes is None or (isinstance(n_bytes, float) and math.isnan(n_bytes)):
        return "an unknown amount"
    n = float(n_bytes)
    if n >= GiB:
        return f"{n / GiB:.1f} GiB"
    if n >= MiB:
        return f"{n / MiB:.0f} MiB"
    return f"{n / KiB:.0f} KiB" if n >= KiB else f"{n:.0f} B"
