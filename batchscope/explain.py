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
    Latency is shown at the SLO's percentile (P95 without an SLO). The sentences read batch sizes: a
    continuous run along another axis (the page shows those on the Run page instead) gets them without
    the analysis' markers, which lie on that axis, rather than a crash."""
    percentile = slo.percentile if slo is not None else 95
    charted = analysis
    if analysis is not None and analysis.axis.key != "batch_size":
        analysis = None
    throughput = throughput_sentences(table, analysis)
    done = cancelled_after(run, table)
    if done is not None:
        throughput = (throughput[0], with_clause(throughput[1], f"this run was cut short, cancelled after {done}, "
                                                                "so larger batches were never measured"))
    return [
        Step("throughput", throughput_title(table, analysis),
             explain_charts.throughput_chart(table, charted), throughput),
        Step("latency", "Per-request latency: time to first token and inter-token latency",
             explain_charts.latency_chart(table, percentile), latency_sentences(table, percentile, run)),
        Step("utilisation", "Utilisation: GPU busy-time vs throughput",
             explain_charts.utilisation_chart(table), utilisation_sentences(run, table)),
        Step("memory", "Memory: fixed weights; KV cache and activations grow with the batch",
             explain_charts.memory_chart(table, split), memory_sentences(table, split)),
        Step("roofline", "The roofline: memory- or compute-bound, and how close to the floor",
             explain_charts.roofline_chart(table, charted.ridge_batch), roofline_sentences(run, table, analysis)),
        Step("working_point", "The working point under a latency SLO",
             explain_charts.working_point_chart(table, charted, slo), working_point_sentences(table, analysis, slo)),
    ]


# ---- sentence builders, one per step ----

def throughput_shape(table: pd.DataFrame, analysis: Analysis | None) -> str:
    """What the curve does, one word the title and the sentences both read so they never disagree:
    none, one, plateau, first (best at the smallest batch), falls, noisy_fall (the median falls by more
    than a doubling must add, inside the repeats' spread), level (a smaller drop inside the spread), rising."""
    curve = measured(table, "output_tokens_per_s")
    if curve.empty:
        return "none"
    if len(curve) == 1:
        return "one"
    best = curve.loc[curve["output_tokens_per_s"].idxmax()]
    last = curve.iloc[-1]
    plateau = analysis.plateau if analysis is not None else None
    if plateau is not None and (curve["batch_size"] > int(plateau.x)).any():
        return "plateau"
    if int(best["batch_size"]) == int(last["batch_size"]):
        return "rising"
    if int(best["batch_size"]) == int(curve.iloc[0]["batch_size"]):
        return "first"
    if not spreads_overlap(best, last):
        return "falls"
    gain = analysis.plateau_gain if analysis is not None else PADDING_OF_NOTE
    drop = 1 - float(last["output_tokens_per_s"]) / float(best["output_tokens_per_s"])
    return "noisy_fall" if drop >= gain else "level"


def throughput_title(table: pd.DataFrame, analysis: Analysis | None) -> str:
    """The throughput step's title: what this run's curve does, never a claim the curve contradicts."""
    shape = throughput_shape(table, analysis)
    curve = measured(table, "output_tokens_per_s")
    if shape == "none":
        return "Throughput vs batch size: no batch finished yet"
    best = int(curve.loc[curve["output_tokens_per_s"].idxmax(), "batch_size"])
    last, first = int(curve.iloc[-1]["batch_size"]), int(curve.iloc[0]["batch_size"])
    ceiling = oom_past(table, last)
    titles = {
        "one": f"Throughput at batch {first}: one point, no curve yet",
        "plateau": f"Throughput plateaus past batch {int(analysis.plateau.x) if analysis and analysis.plateau else best}",
        "first": f"Throughput is highest at the smallest batch, {first}: larger batches add none",
        "falls": f"Throughput peaks at batch {best}, then falls",
        "noisy_fall": f"Throughput peaks at batch {best}, then falls (within the repeats' noise)",
        "level": f"Throughput levels off past batch {best}",
        "rising": (f"Throughput still rising at batch {last}, the largest that fit in memory" if ceiling is not None
                   else f"Throughput still rising at the largest batch measured, {last}"),
    }
    return titles[shape] + (", after a dip" if dip(curve) is not None else "")


def throughput_sentences(table: pd.DataFrame, analysis: Analysis | None) -> tuple[str, str]:
    """From the first to the best batch (and by how much), then where the returns stop, and any dip on the way."""
    opening, second = throughput_pair(table, analysis)
    found = dip(measured(table, "output_tokens_per_s"))
    return opening, (with_clause(second, dip_words(*found)) if found is not None else second)


def throughput_pair(table: pd.DataFrame, analysis: Analysis | None) -> tuple[str, str]:
    shape = throughput_shape(table, analysis)
    curve = measured(table, "output_tokens_per_s")
    if shape == "none":
        return ("No batch size finished with a throughput measurement, so there is no curve to explain yet.",
                not_ok_words(table))
    first, best, last = curve.iloc[0], curve.loc[curve["output_tokens_per_s"].idxmax()], curve.iloc[-1]
    b0, t0 = int(first["batch_size"]), float(first["output_tokens_per_s"])
    bb, tb = int(best["batch_size"]), float(best["output_tokens_per_s"])
    if shape == "one":
        return (f"Only batch {b0} finished ({tok_s(t0)}), so there is no rise to compare yet.",
                "Measure at least two batch sizes to see how throughput answers a bigger batch.")
    if bb == b0:
        opening = f"Throughput is highest at the smallest batch, {b0} ({tok_s(t0)}): no larger batch added any."
    else:
        opening = (f"Throughput rises from {tok_s(t0)} at batch {b0} to {tok_s(tb)} at batch {bb}: "
                   f"{times(tb / t0)} the throughput for a {bb / b0:g}× larger batch.")
    if shape == "plateau":
        plateau = analysis.plateau
        here = curve[curve["batch_size"] == int(plateau.x)].iloc[0]
        nxt = curve[curve["batch_size"] > int(plateau.x)].iloc[0]
        gain = doubling_gain(here, nxt)
        change = f"adds only {pct(gain, 1)}" if gain >= 0 else f"loses {pct(-gain, 1)}"
        return opening, (f"Past batch {int(plateau.x)} it plateaus: going on to batch {int(nxt['batch_size'])} "
                         f"{change} per doubling ({tok_s(here['output_tokens_per_s'])} → "
                         f"{tok_s(nxt['output_tokens_per_s'])}), under the {pct(analysis.plateau_gain)} a doubling "
                         f"must add to count as still rising.")
    if shape in ("falls", "noisy_fall", "level", "first"):
        drop = 1 - float(last["output_tokens_per_s"]) / tb
        why = padding_words(last) + step_words(best, last)
        if shape == "level" or (shape == "first" and spreads_overlap(best, last)):
            return opening, (f"Past batch {bb} it stays level within the noise: batch {int(last['batch_size'])} "
                             f"gives {tok_s(last['output_tokens_per_s'])}, {pct(drop, 1)} less, but their repeats "
                             f"overlap ({describe_spread(best)} against {describe_spread(last)}).")
        if shape == "noisy_fall":
            return opening, (f"Past its peak at batch {bb} the median falls: batch {int(last['batch_size'])} gives "
                             f"{tok_s(last['output_tokens_per_s'])}, {pct(drop, 1)} less (their repeats overlap, "
                             f"{describe_spread(best)} against {describe_spread(last)}, so how much is noise, but it "
                             f"bought nothing){why}.")
        return opening, (f"Past its peak at batch {bb} it falls: batch {int(last['batch_size'])} gives "
                         f"{tok_s(last['output_tokens_per_s'])}, {pct(drop, 1)} less{why}.")
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


def dip(curve: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series] | None:
    """The deepest fall inside the curve that a later batch recovers from: (peak before it, lowest point,
    first point back at or above the peak); None when every fall is final (or there is none)."""
    found, peak, trough = None, None, None
    for _, point in curve.iterrows():
        t = float(point["output_tokens_per_s"])
        if peak is None or t >= float(peak["output_tokens_per_s"]):
            if trough is not None:
                depth = 1 - float(trough["output_tokens_per_s"]) / float(peak["output_tokens_per_s"])
                if found is None or depth > found[0]:
                    found = (depth, peak, trough, point)
            peak, trough = point, None
        elif trough is None or t < float(trough["output_tokens_per_s"]):
            trough = point
    return found[1:] if found is not None else None


def dip_words(peak: pd.Series, trough: pd.Series, back: pd.Series) -> str:
    """The dip in the run's numbers, and whether its repeats resolve it."""
    drop = 1 - float(trough["output_tokens_per_s"]) / float(peak["output_tokens_per_s"])
    noise = ", within the noise: their repeats overlap" if spreads_overlap(peak, trough) else ""
    return (f"on the way it dips from {tok_s(peak['output_tokens_per_s'])} at batch {int(peak['batch_size'])} to "
            f"{tok_s(trough['output_tokens_per_s'])} at batch {int(trough['batch_size'])} ({pct(drop, 1)} less{noise})"
            f" before batch {int(back['batch_size'])} recovers to {tok_s(back['output_tokens_per_s'])}")


def step_words(low: pd.Series, high: pd.Series) -> str:
    """The decode-step floor: when the step grew about as fast as the batch, more rows bought no more tokens/s."""
    a, z = value(low, "decode_step_ms"), value(high, "decode_step_ms")
    grown = float(high["batch_size"]) / float(low["batch_size"])
    if a is None or z is None or grown <= 1 or z / a < 0.75 * grown:
        return ""
    return (f"; a decode step went from {ms(a)} at batch {int(low['batch_size'])} to {ms(z)} at batch "
            f"{int(high['batch_size'])}, {times(z / a)} for {times(grown)} the rows")


def with_clause(sentence: str, clause: str) -> str:
    """`sentence` with `clause` added before its full stop."""
    return f"{sentence[:-1]}; {clause}."


def latency_sentences(table: pd.DataFrame, percentile: int = 95, run: dict[str, Any] | None = None
                      ) -> tuple[str, str]:
    """TTFT and ITL at the chosen percentile at the smallest and largest batch, and the token rate a user
    at that percentile sees (1000 / ITL); how many requests a tied percentile rests on, and outlier steps."""
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
    tie = tied_percentile_words(ttft, percentile, run or {})
    first = with_clause(first, tie) if tie else first
    itl = measured(table, itl_col)
    outliers = outlier_words(table)
    if itl.empty:
        second = "This run recorded no inter-token latency (ITL), so the token rate each user sees is unknown."
        return first, with_clause(second, outliers) if outliers else second
    a, z = itl.iloc[0], itl.iloc[-1]
    va, vz = float(a[itl_col]), float(z[itl_col])
    if len(itl) == 1:
        second = (f"{p} inter-token latency (ITL) is {ms(va)} at batch {int(a['batch_size'])}: each user "
                  f"receives about {num(1000 / va)} tokens/s (1000 / ITL).")
    else:
        second = (f"{p} inter-token latency (ITL) {moves(va, vz)} from {ms(va)} at batch {int(a['batch_size'])} to "
                  f"{ms(vz)} at batch {int(z['batch_size'])}, so each user's stream goes from about "
                  f"{num(1000 / va)} to {num(1000 / vz)} tokens/s (1000 / ITL).")
    return first, with_clause(second, outliers) if outliers else second


def requests_at(point: pd.Series, run: dict[str, Any]) -> int | None:
    """How many requests a point's latency percentiles rest on: batch × repeats for a static point, the
    spec's num_requests × repeats for a continuous one; None when the repeats were not recorded."""
    repeats = value(point, "repeats")
    if repeats is None or repeats < 1:
        return None
    spec = run.get("spec") or {}
    per_repeat = spec.get("num_requests") if spec.get("mode") == "continuous" else point["batch_size"]
    return int(per_repeat) * int(repeats) if per_repeat else None


def tied_percentile_words(points: pd.DataFrame, percentile: int, run: dict[str, Any]) -> str:
    """Where P95 and P99 TTFT are the same number, why: how few requests the higher one rests on (it is then
    the slowest request) or, in a static batch, that its rows share one prefill. Empty when they differ (or,
    for a continuous run with 100 requests or more, when neither reason holds)."""
    if percentile not in (95, 99):
        return ""
    column, other = f"ttft_ms_p{percentile}", f"ttft_ms_p{ {95: 99, 99: 95}[percentile]}"
    if other not in points:
        return ""
    tied = points[(pd.to_numeric(points[other], errors="coerce") - points[column]).abs() <= 1e-6 * points[column]]
    counted = [(row, n) for _, row in tied.iterrows() if (n := requests_at(row, run)) is not None]
    if not counted:
        return ""
    batches = ", ".join(str(int(row["batch_size"])) for row, _ in counted)
    few = [found for found in counted if found[1] < 100]  # then P99 has under one request beyond it
    row, n = max(few, key=lambda found: found[1]) if few else min(counted, key=lambda found: found[1])
    static = (run.get("spec") or {}).get("mode") != "continuous"
    if n < 100:
        why = f"P99 of {n} requests is simply the slowest one"
    elif static:
        why = f"even with {n} requests, the rows of one static batch share one prefill, so its slowest requests tie"
    else:
        return ""
    per = f"{int(row['batch_size'])} × {int(row['repeats'])} repeats" if static else f"{int(row['repeats'])} repeats"
    return (f"P95 and P99 TTFT are the same at batch {batches}: at batch {int(row['batch_size'])} they rest on "
            f"{n} requests ({per}), and {why}")


def outlier_words(table: pd.DataFrame) -> str:
    """Which points had measured decode steps over 5× their like steps, and how many; empty when none."""
    found = measured(table, "outlier_steps")
    found = found[found["outlier_steps"] > 0]
    if found.empty:
        return ""
    listed = " and ".join(f"{int(row['outlier_steps'])} at batch {int(row['batch_size'])}" for _, row in found.iterrows())
    return (f"{listed} measured decode step(s) took over 5× the median of like steps (a compile, autotune or "
            f"allocation), which the tail of its ITL includes")


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


KV_MEASURES = (("mem_kv_allocated", "allocated (what the cache reserves)"),
               ("mem_kv_used", "used (what live tokens fill)"))
SPLIT_GROWTH = (("kv", "KV cache"), ("activations", "activations"), ("allocator_reserve", "allocator reserve"))


def kv_measure(table: pd.DataFrame) -> tuple[str, str] | None:
    """The one KV column both memory sentences read: allocated when recorded, else used; with its meaning."""
    for column, meaning in KV_MEASURES:
        if not measured(table, column).empty:
            return column, meaning
    return None


def memory_sentences(table: pd.DataFrame, split: pd.DataFrame) -> tuple[str, str]:
    """Weights fixed and the KV cache growing (one KV measure, named); then capacity, headroom and the OOM
    point, projected from how much the whole footprint grew per request."""
    weights = measured(table, "mem_weights")
    kv = kv_measure(table)
    if weights.empty and kv is None:
        first = "This run recorded no memory split (weights, KV cache), so where its memory goes is unknown."
    else:
        held = (f"The weights take {size(weights['mem_weights'].max())} at every batch size" if not weights.empty
                else "This run recorded no weight bytes")
        if kv is None:
            first = f"{held}; the KV cache was not recorded."
        else:
            column, meaning = kv
            rows = measured(table, column)
            a, z = rows.iloc[0], rows.iloc[-1]
            per = f", {size(float(z[column]) / int(z['batch_size']))} per request"
            if len(rows) == 1:
                first = (f"{held}; the KV cache {meaning} is {size(a[column])} at batch {int(a['batch_size'])}{per}, "
                         f"the only finished batch.")
            else:
                first = (f"{held}, while the KV cache {meaning} grows with the batch: {size(a[column])} at batch "
                         f"{int(a['batch_size'])}, {size(z[column])} at batch {int(z['batch_size'])}{per}.")
    return first, capacity_sentence(table, split)


def capacity_sentence(table: pd.DataFrame, split: pd.DataFrame) -> str:
    """How much of the device the largest ok batch used, and the OOM point or where the measured growth of the
    whole footprint (KV, activations, allocator reserve) per request would fill it."""
    ok_split = split[split["status"] == "ok"] if "status" in split else split
    used = ok_split.dropna(subset=["bytes"]).groupby("batch_size")["bytes"].sum()
    used = used[used > 0]
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
    head = (f"Batch {ooms[0]} ran out of memory; the largest batch that fit, {bl}, used {of}" if ooms
            else f"No batch ran out of memory; the largest, {bl}, used {of}")
    growth = footprint_growth(ok_split)
    if growth is None:
        return head + "."
    per_row, low, parts = growth
    grew = (f"from batch {low} to {bl} the whole footprint grew {size(per_row)} per request ("
            + ", ".join(f"{name} {size(parts[key])}" for key, name in SPLIT_GROWTH if key in parts) + ")")
    if math.isnan(capacity) or per_row <= 0:
        return f"{head}; {grew}."
    reach = bl + max(0.0, capacity - ul) / per_row
    if reach > FAR_BATCHES * bl:
        return f"{head}; {grew}, so the capacity line is far away (near batch {reach:.0f})."
    if not ooms:
        return f"{head}; {grew}, so at that rate the device fills near batch {reach:.0f}."
    if reach < ooms[0]:
        return f"{head}; {grew}, so at that rate it was full near batch {reach:.0f}."
    return (f"{head}; {grew}, which alone would fill it only near batch {reach:.0f}, so batch {ooms[0]} needed more "
            f"than that growth predicts.")


def footprint_growth(ok_split: pd.DataFrame) -> tuple[float, int, dict[str, float]] | None:
    """Bytes per added request between the two largest finished batches: the whole footprint, its first batch,
    and the growth of KV (used + unused), activations and allocator reserve; None with fewer than two."""
    wide = ok_split.dropna(subset=["bytes"]).pivot_table(index="batch_size", columns="part", values="bytes",
                                                          aggfunc="sum", observed=True)
    wide = wide[wide.sum(axis=1) > 0].sort_index()
    if len(wide) < 2:
        return None
    low, high = wide.iloc[-2], wide.iloc[-1]
    rows = float(wide.index[-1] - wide.index[-2])
    grown = (high - low).fillna(0.0) / rows
    parts = {"kv": float(grown.get("kv_used", 0.0) + grown.get("kv_unused", 0.0))}
    parts.update({key: float(grown[key]) for key in ("activations", "allocator_reserve") if key in grown})
    return float(grown.sum()), int(wide.index[-2]), parts


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
    short = "".join(f"; {run.get('run_id')} was cut short, cancelled after {done}"
                    for run, table in ((run_a, table_a), (run_b, table_b))
                    if (done := cancelled_after(run, table)) is not None)
    unsteady = unsteady_words(steps_a if slow[0] == label_a else steps_b, b)
    first = (f"At batch {b}, the smallest both ran, a {slow[0]} decode step takes {ms(slow[1]['decode_step_ms'])} "
             f"against {quick[0]}'s {ms(quick[1]['decode_step_ms'])}: {times(ratio)} as long for the same {model} "
             f"weights{short}{unsteady}.")
    chart = explain_charts.contrast_chart({label_a: table_a, label_b: table_b})
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


def cancelled_after(run: dict[str, Any], table: pd.DataFrame) -> str | None:
    """`2 batch sizes`: how far a cancelled run got, so no sentence passes it off as whole; None otherwise."""
    if run.get("state") != "cancelled":
        return None
    done = len(measured(table, "output_tokens_per_s"))
    return f"{done} batch size{'s' if done != 1 else ''}"


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
