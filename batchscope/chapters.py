"""The Explain walk's cross-run chapters: what other stored runs of the same model and workload add to the
explained static run — continuous batching, quantised weights, two GPUs. Each chapter is one `Step` whose
two sentences are built from the runs' own numbers and name the runs; `batchscope.story` picks the runs.

A run is passed as `Told` (its record and its analysis); no streamlit here.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from batchscope import explain_charts
from batchscope.analysis import SLO, Analysis
from batchscope.analysis.curve import tok_s
from batchscope.analysis.marker import num, pct
from batchscope.explain import Step, cut_short, measured, ms, size, times, value

Told = tuple[dict[str, Any], Analysis]


def name(told: Told) -> str:
    """The run's id, said to be cut short when it was cancelled."""
    run, analysis = told
    return f"{run.get('run_id')}{cut_short(run, analysis.table)}"


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


# ---- a. continuous batching ----

def continuous_chapter(static: Told, continuous: list[Told], slo: SLO | None) -> Step | None:
    """The static run against continuous runs of the same workload: where each meets the latency SLO and
    with how much throughput, and where each one's knee lies (the title claims a move only when a continuous
    run gives more throughput under the SLO). None without a continuous run with a point, or without an SLO."""
    continuous = sorted((told for told in continuous if best(told[1].table) is not None),
                        key=lambda told: told[1].axis.key != "max_num_seqs")  # the running-batch limit first
    if not continuous or best(static[1].table) is None:
        return None
    slo = slo or spec_slo(static[0])
    if slo is None:
        return None
    drawn = {f"{name(static)} (static, batch size)": static[1].table}  # a rate sweep is told, not drawn:
    drawn.update({f"{name(told)} (max_num_seqs)": told[1].table  # its x is not a running-batch limit
                  for told in continuous if told[1].axis.key == "max_num_seqs"})
    chart = explain_charts.runs_chart(
        drawn, (("output_tokens_per_s", "output tokens/s", False), (slo.column, f"{slo.name} (ms, log)", True)),
        x_title="running-batch limit: batch size or max_num_seqs (log2)",
        level=(slo.column, slo.ms, f"SLO {slo.name} ≤ {slo.ms:g} ms"))
    gains = max(meets_words(told, slo)[1] or 0.0 for told in continuous) > (meets_words(static, slo)[1] or 0.0)
    title = "Continuous batching moves the knee" if gains else "Continuous vs static batching under the same SLO"
    return Step("continuous", title, chart,
                (continuous_first(static, continuous, slo), continuous_second(static, continuous, slo)))


def spec_slo(run: dict[str, Any]) -> SLO | None:
    """The SLO the run's own spec recorded (its P95), when the presenter set none."""
    spec = run.get("spec") or {}
    return SLO(spec["slo_metric"], 95, float(spec["slo_ms"])) if spec.get("slo_metric") and spec.get("slo_ms") else None


def meets_words(told: Told, slo: SLO) -> tuple[str, float | None]:
    """Where a run meets the SLO and what it gives there, and that throughput (None when nothing meets it)."""
    point = slo_point(told, slo)
    if point is None:
        first = measured(told[1].table, slo.column)
        slowest = f": even {at(told, first.iloc[0])} takes {ms(first.iloc[0][slo.column])}" if not first.empty else ""
        return f"meets it nowhere{slowest}", None
    tput = float(point["output_tokens_per_s"])
    return f"does best within it at {at(told, point)}: {tok_s(tput)} at {ms(point[slo.column])}", tput


def continuous_first(static: Told, continuous: list[Told], slo: SLO) -> str:
    """Under the SLO: the static run's limit and throughput against the best continuous run's."""
    static_words, static_tput = meets_words(static, slo)
    peak = best(static[1].table)
    missed = "" if value(peak, slo.column) is not None and float(peak[slo.column]) <= slo.ms \
        else f", where it takes {ms(peak[slo.column])}" if value(peak, slo.column) is not None else ""
    told, (words, tput) = max(((told, meets_words(told, slo)) for told in continuous),
                              key=lambda found: found[1][1] or 0.0)
    gain = f", {times(tput / static_tput)} the static throughput under the same SLO" if tput and static_tput else ""
    return (f"Under a {slo.name} SLO of {num(slo.ms)} ms, static batching ({name(static)}) {static_words} (its "
            f"throughput peaks at batch {int(peak['batch_size'])}, {tok_s(peak['output_tokens_per_s'])}{missed}); "
            f"continuous batching of the same workload ({name(told)}{arrival_words(told[0])}) {words}{gain}.")


def arrival_words(run: dict[str, Any]) -> str:
    """`, Poisson 8 req/s`: the one arrival process a max_num_seqs sweep was fed (empty for a rate sweep)."""
    arrival = str((run.get("spec") or {}).get("arrival") or "")
    kind, _, rate = arrival.partition(":")
    return f", {kind.capitalize()} {rate} req/s" if rate and "," not in rate else ""


def continuous_second(static: Told, continuous: list[Told], slo: SLO) -> str:
    """Each run's knee along its own axis, and why a point misses the SLO when queue wait or goodput say."""
    parts = [knee_words(static)]
    for told in continuous:
        table = told[1].table
        span = measured(table, "output_tokens_per_s")
        words = (f"{name(told)} sweeps {told[1].axis.noun} from {told[1].axis.value(span.iloc[0]['x'])} to "
                 f"{told[1].axis.value(span.iloc[-1]['x'])}: {knee_words(told, own=False)}")
        latency = measured(table, slo.column)
        missed = latency[latency[slo.column] > slo.ms]
        queue = value(missed.iloc[0], "queue_ms_p95") if not missed.empty else None
        if missed.empty and not latency.empty:
            words += (f", and every point meets the SLO ({ms(latency[slo.column].min())}–"
                      f"{ms(latency[slo.column].max())})")
        if queue is not None:
            point = missed.iloc[0]
            good, served = value(point, "goodput_rps"), value(point, "requests_per_s")
            rate = (f", goodput {num(good)} of {num(served)} req/s under the run's own {point['goodput_slo']}"
                    if good is not None and served else "")
            words += (f", and {at(told, point)} misses the SLO ({ms(point[slo.column])}) because requests wait for "
                      f"a free slot (P95 queue wait {ms(queue)}{rate})")
        parts.append(words)
    return "; ".join(parts) + "."


def knee_words(told: Told, own: bool = True) -> str:
    """Where Kneedle (else the plateau) puts the run's knee, or that it finds none."""
    analysis = told[1]
    knee = analysis.kneedle or analysis.plateau
    who = f"{name(told)}'s knee" if own else "its knee"
    if knee is None:
        return f"{who} is not called (too few points or no bend)"
    how = "Kneedle" if analysis.kneedle is not None else "plateau"
    return f"{who} is at {analysis.axis.at(knee.x)} ({how})"


# ---- b. quantised weights ----

def quant_chapter(base: Told, quantised: list[Told]) -> Step | None:
    """The full-precision run against quantised-weight runs of the same workload: decode step at batch 1,
    best throughput and where, the OOM batch, and what the accuracy check on these weights says (the title
    claims a move only when a quantised run peaks elsewhere or higher)."""
    told_all = [base] + [told for told in quantised if best(told[1].table) is not None]
    if len(told_all) < 2 or best(base[1].table) is None:
        return None
    labels = {dtype_label(told): told for told in told_all}
    chart = explain_charts.runs_chart({f"{label} ({name(told)})": told[1].table for label, told in labels.items()},
                                      (("output_tokens_per_s", "output tokens/s", False),
                                       ("decode_step_ms", "decode step (ms, log)", True)), legend="weights")
    tops = {label: best(told[1].table) for label, told in labels.items()}
    base_top = tops[dtype_label(base)]
    moved = any(int(top["batch_size"]) != int(base_top["batch_size"])
                or float(top["output_tokens_per_s"]) > float(base_top["output_tokens_per_s"]) for top in tops.values())
    title = "Quantised weights move it again" if moved else "Quantised weights against full precision"
    return Step("quantised", title, chart, (quant_first(labels), quant_second(labels)))


def dtype_label(told: Told) -> str:
    return str(told[0].get("dtype") or (told[0].get("model") or {}).get("dtype") or "?")


def quant_first(labels: dict[str, Told]) -> str:
    """Decode step at the smallest batch all ran, weight bytes, and each run's best throughput."""
    steps = {label: measured(told[1].table, "decode_step_ms") for label, told in labels.items()}
    shared = set.intersection(*(set(s["batch_size"].astype(int)) for s in steps.values()))
    parts = []
    if shared:
        b = min(shared)
        for label, told in labels.items():
            step = steps[label][steps[label]["batch_size"] == b].iloc[0]["decode_step_ms"]
            weights = (told[0].get("model") or {}).get("weight_bytes")
            parts.append(f"{ms(step)} with {label} weights ({size(weights)}, {name(told)})")
        head = f"At batch {b} a decode step, which reads every weight once, takes " + listed(parts)
    else:
        head = "The runs share no batch size with a measured decode step"
    peaks = [f"{label} {tok_s(top['output_tokens_per_s'])} at batch {int(top['batch_size'])}"
             for label, told in labels.items() if (top := best(told[1].table)) is not None]
    return f"{head}; the best throughput is {listed(peaks)}."


def quant_second(labels: dict[str, Told]) -> str:
    """Where each ran out of memory, and the accuracy caveat recorded in each quantised run's model facts."""
    ooms = []
    for label, told in labels.items():
        table = told[1].table
        oom = sorted(int(b) for b in table.loc[table["status"] == "oom", "batch_size"]) if "status" in table else []
        ooms.append(f"{label} at batch {oom[0]}" if oom else f"{label} nowhere it ran")
    checks = [accuracy_words(label, told[0].get("model") or {}) for label, told in labels.items()]
    checks = [c for c in checks if c]
    random = any((told[0].get("model") or {}).get("source") == "preset" for told in labels.values())
    caveat = ("; these are random weights, so this says how much the quantised kernels change this network's "
              "output, not how a trained model's answers would change" if random else "")
    accuracy = (f"; against bfloat16 on the same weights, {listed(checks)}{caveat}" if checks
                else "; no accuracy check was recorded for the quantised runs")
    return f"Memory ran out for {listed(ooms)}: smaller weights leave the KV cache and activations to fill the device{accuracy}."


def accuracy_words(label: str, model: dict[str, Any]) -> str:
    """`fp8 greedy tokens agree on 5–12 % of steps (logits cosine 0.79–0.84)` from model.json's quant_accuracy."""
    checks = model.get("quant_accuracy") or []
    if not checks:
        return ""
    agree = sorted(float(c["token_agreement"]) for c in checks)
    cosine = sorted(float(c["logits_cosine"]) for c in checks)
    span = (lambda xs, fmt: fmt(xs[0]) if xs[0] == xs[-1] else f"{fmt(xs[0])}–{fmt(xs[-1])}")
    return (f"{label} greedy tokens agree on {span(agree, lambda a: pct(a, 0))} of steps "
            f"(logits cosine {span(cosine, lambda c: f'{c:.2f}')})")


# ---- c. two GPUs ----

def parallel_chapter(single: Told, tp: Told | None, replicas: Told | None) -> Step | None:
    """One GPU against tensor parallel over two and two replicas: who wins at the smallest and the largest
    batch all of them ran, with P95 latency, and the memory each GPU holds there."""
    layouts = {"one GPU": single}
    layouts.update({label: told for label, told in (("tensor parallel ×2", tp), ("2 replicas", replicas))
                    if told is not None and best(told[1].table) is not None})
    if len(layouts) < 2:
        return None
    curves = {label: measured(told[1].table, "output_tokens_per_s") for label, told in layouts.items()}
    shared = sorted(set.intersection(*(set(c["batch_size"].astype(int)) for c in curves.values())))
    if not shared:
        return None
    chart = explain_charts.runs_chart({f"{label} ({name(told)})": told[1].table for label, told in layouts.items()},
                                      (("output_tokens_per_s", "output tokens/s", False),
                                       ("itl_ms_p95", "P95 ITL (ms, log)", True)), legend="layout")
    small, large = shared[0], shared[-1]
    first = f"At batch {small} " + winner_words(curves, small, "itl_ms_p95", "ITL") + "."
    second = (f"At batch {large} " + winner_words(curves, large, "ttft_ms_p95", "TTFT")
              + "; memory in use on each GPU there: " + memory_words(curves, large, layouts) + ".")
    return Step("parallel", "Two GPUs: tensor parallel vs replicas", chart, (first, second))


def winner_words(curves: dict[str, pd.DataFrame], batch: int, column: str, metric: str) -> str:
    """`the most throughput comes from tensor parallel ×2 (645 tok/s, P95 ITL 4.32 ms), against …` at one batch."""
    rows = {label: curve[curve["batch_size"] == batch].iloc[0] for label, curve in curves.items()}
    order = sorted(rows, key=lambda label: float(rows[label]["output_tokens_per_s"]), reverse=True)

    def said(label: str) -> str:
        latency = value(rows[label], column)
        at_ms = f", P95 {metric} {ms(latency)}" if latency is not None else ""
        return f"{label} ({tok_s(rows[label]['output_tokens_per_s'])}{at_ms})"
    return f"the most throughput comes from {said(order[0])}, against " + listed([said(label) for label in order[1:]])


def memory_words(curves: dict[str, pd.DataFrame], batch: int, layouts: dict[str, Told]) -> str:
    parts = []
    for label, curve in curves.items():
        used = value(curve[curve["batch_size"] == batch].iloc[0], "mem_nvml_used")
        parts.append(f"{size(used)} for {label} ({name(layouts[label])})")
    return listed(parts)


def listed(parts: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"
