"""The Explain chapter on continuous batching: the explained static run against continuous runs of the
same workload, where each meets the latency SLO and with how much throughput, and where each knee lies.
`batchscope.explain.partners` picks the runs."""
from __future__ import annotations

from typing import Any

import pandas as pd

from batchscope.analysis import SLO
from batchscope.analysis.marker import num
from batchscope.explain import charts
from batchscope.explain.step import Step
from batchscope.explain.told import Told, at, best, name, slo_point
from batchscope.explain.words import measured, times, value
from batchscope.units import ms, tok_s

def continuous_chapter(static: Told, continuous: list[Told], slo: SLO | None) -> Step | None:
    """The static run against continuous runs of the same workload: where each meets the latency SLO and
    with how much throughput, and where each one's knee lies (the title claims a move only when a continuous
    run gives more throughput under the SLO). None without a continuous run with a point, or without an SLO:
    only the SLO the presenter set is told (a run's own spec SLO would be a second one the room never chose)."""
    continuous = sorted((told for told in continuous if best(told[1].table) is not None),
                        key=lambda told: told[1].axis.key != "max_num_seqs")  # the running-batch limit first
    if not continuous or best(static[1].table) is None or slo is None:
        return None
    drawn = {f"{name(static)} (static, batch size)": static[1].table}  # a rate sweep is told, not drawn:
    drawn.update({f"{name(told)} (max_num_seqs)": told[1].table  # its x is not a running-batch limit
                  for told in continuous if told[1].axis.key == "max_num_seqs"})
    chart = charts.runs_chart(
        drawn, (("output_tokens_per_s", "output tokens/s", False), (slo.column, f"{slo.name} (ms, log)", True)),
        x_title="running-batch limit: batch size or max_num_seqs (log2)",
        level=(slo.column, slo.ms, f"SLO {slo.name} ≤ {slo.ms:g} ms"))
    gains = max(meets_words(told, slo)[1] or 0.0 for told in continuous) > (meets_words(static, slo)[1] or 0.0)
    title = "Continuous batching moves the knee" if gains else "Continuous vs static batching under the same SLO"
    return Step("continuous", title, chart,
                (continuous_first(static, continuous, slo), continuous_second(static, continuous, slo)))


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
            f"throughput is best at batch {int(peak['batch_size'])}, {tok_s(peak['output_tokens_per_s'])}{missed}); "
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
        words = knee_words(told)  # the run's name says what it sweeps
        latency = measured(table, slo.column)
        missed = latency[latency[slo.column] > slo.ms]
        queue = value(missed.iloc[0], "queue_ms_p95") if not missed.empty else None
        if missed.empty and not latency.empty:
            words += (f", and every point meets the SLO ({ms(latency[slo.column].min())}–"
                      f"{ms(latency[slo.column].max())})")
        if queue is not None:  # goodput is left out: the run counts it under its own spec's SLO, not this one
            point = missed.iloc[0]
            words += (f", and {at(told, point)} misses the SLO ({ms(point[slo.column])}) because requests wait for "
                      f"{what_held_back(point)} (P95 queue wait {ms(queue)})")
        parts.append(words)
    return "; ".join(parts) + "."


def what_held_back(point: pd.Series) -> str:
    """What a point's queued requests waited for (docs/design.md, continuous batching): KV blocks when the
    scheduler counted such waits; never a slot when every closed-loop client had one, so their turn at prefill
    (a step takes at most max_num_batched_tokens prompt tokens, which requests sent together share); else a
    free slot."""
    if (value(point, "admission_waits") or 0) > 0:
        return "KV cache blocks"
    clients, slots = value(point, "concurrency"), value(point, "max_num_seqs")
    if clients is not None and slots is not None and clients <= slots:
        return "their turn at prefill"
    return "a free slot"


def knee_words(told: Told) -> str:
    """Where Kneedle (else the plateau) puts the run's knee, or that it finds none."""
    analysis = told[1]
    knee = analysis.kneedle or analysis.plateau
    who = f"{name(told)}'s knee"
    if knee is None:
        return f"{who} is not called (too few points or no bend)"
    how = "Kneedle" if analysis.kneedle is not None else "plateau"
    return f"{who} is at {analysis.axis.at(knee.x)} ({how})"