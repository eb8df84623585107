"""The Explain chapter on two GPUs: one GPU against tensor parallel over two and two replicas."""
from __future__ import annotations

import pandas as pd

from batchscope.explain import charts
from batchscope.explain.step import Step
from batchscope.explain.told import Told, best, name
from batchscope.explain.words import listed, measured, value
from batchscope.units import ms, size, tok_s

def parallel_chapter(single: Told, tp: Told | None, replicas: Told | None) -> Step | None:
    """One GPU against tensor parallel over two and two replicas: who wins at the smallest and the largest
    batch all of them ran, with the P95 ITL the chart draws beside throughput, and the memory each GPU holds there."""
    layouts = {"one GPU": single}
    layouts.update({label: told for label, told in (("tensor parallel ×2", tp), ("2 replicas", replicas))
                    if told is not None and best(told[1].table) is not None})
    if len(layouts) < 2:
        return None
    curves = {label: measured(told[1].table, "output_tokens_per_s") for label, told in layouts.items()}
    shared = sorted(set.intersection(*(set(c["batch_size"].astype(int)) for c in curves.values())))
    if not shared:
        return None
    chart = charts.runs_chart({f"{label} ({name(told)})": told[1].table for label, told in layouts.items()},
                                      (("output_tokens_per_s", "output tokens/s", False),
                                       ("itl_ms_p95", "P95 ITL (ms, log)", True)), legend="layout")
    small, large = shared[0], shared[-1]
    first = f"At batch {small} " + winner_words(curves, small, "itl_ms_p95", "ITL") + "."
    second = (f"At batch {large} " + winner_words(curves, large, "itl_ms_p95", "ITL")
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