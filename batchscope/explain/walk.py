"""The Explain page's story: six steps through one run, each one chart and two sentences.

Every sentence is built from the run's own numbers (its points table and analysis), so another run
tells its own story; where a number was never recorded the sentence says so instead of guessing.
No streamlit here: the page only lays the steps out.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from batchscope.analysis import SLO, Analysis
from batchscope.explain import charts
from batchscope.explain.latency import latency_sentences
from batchscope.explain.memory import memory_sentences
from batchscope.explain.roofline import roofline_sentences
from batchscope.explain.step import Step
from batchscope.explain.throughput import throughput_sentences, throughput_title
from batchscope.explain.utilisation import utilisation_sentences, utilisation_title
from batchscope.explain.words import cancelled_after, with_clause
from batchscope.explain.working_point import working_point_sentences

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
             charts.throughput_chart(table, charted), throughput),
        Step("latency", "Per-request latency: time to first token and inter-token latency",
             charts.latency_chart(table, percentile), latency_sentences(table, percentile, run)),
        Step("utilisation", utilisation_title(table),
             charts.utilisation_chart(table, (run.get("env") or {}).get("cpu_count")), utilisation_sentences(run, table)),
        Step("memory", "Memory: fixed weights; KV cache and activations grow with the batch",
             charts.memory_chart(table, split, on_gpu=(run.get("env") or {}).get("device", run.get("device")) != "cpu"),
             memory_sentences(table, split)),
        Step("roofline", "The roofline: memory- or compute-bound, and how close to the floor",
             charts.roofline_chart(table, charted.ridge_batch), roofline_sentences(run, table, analysis)),
        Step("working_point", "The working point under a latency SLO",
             charts.working_point_chart(table, charted, slo), working_point_sentences(table, analysis, slo)),
    ]
