"""The metric catalogue: every measured column a chart draws is in it, and the names the charts and tables
show are the catalogue's."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from batchscope.analysis import analyse, memory_split, model_facts
from batchscope.charts import linked_charts
from batchscope.charts.frames import LATENCY_METRICS, MEMORY_PARTS, UTILISATION_COLUMNS
from batchscope.metric_catalogue import METRICS, PANEL_UNITS, columns_stored_as, header, label
from batchscope.ui.run_view_tables import TABLE_COLUMNS
from tests.test_charts import CALIBRATION, summary_table

# What places a point rather than measures it: the axis, its status, its verdicts.
NOT_MEASURED = {"point_index", "batch_size", "status", "error", "sweep_axis", "sweep_value", "max_num_seqs",
                "arrival_rate", "concurrency", "added_for", "trust_metrics", "x"}


def every_metric_recorded() -> pd.DataFrame:
    """A sweep that recorded every series the Run page can draw: GPM counters, CPU, queue wait, all-reduce."""
    points = summary_table(points=4)
    n = len(points)
    return points.assign(sm_util_pct=np.linspace(20, 80, n), tensor_active_pct=np.linspace(5, 40, n),
                         dram_bw_util_pct=np.linspace(30, 90, n), cpu_pct=np.linspace(100, 150, n),
                         queue_ms_p50=np.linspace(1, 5, n), queue_ms_p95=np.linspace(2, 9, n),
                         queue_ms_p99=np.linspace(3, 12, n), comm_share=np.linspace(0.05, 0.2, n))


def spec_of(table: pd.DataFrame, split: pd.DataFrame, analysis) -> str:
    return json.dumps(linked_charts(table, analysis, memory_split=split, run="r"), sort_keys=True, default=str)


def test_every_column_a_run_chart_draws_is_in_the_catalogue() -> None:
    points = every_metric_recorded()
    analysis = analyse(points, model_facts("llama-3.1-8b", "bfloat16"), CALIBRATION, None)
    table, split = analysis.table, memory_split(points)
    drawn_by_table = spec_of(table, split, analysis)
    drawn = set()
    for column in table.columns:
        if column in NOT_MEASURED or column.startswith("trust"):
            continue
        if spec_of(table.drop(columns=column), split, analysis) != drawn_by_table:
            drawn.add(column)
        elif column.startswith("mem_"):  # the memory split is built from the points' byte columns
            if spec_of(table, memory_split(points.assign(**{column: np.nan})), analysis) != drawn_by_table:
                drawn.add(column)
    assert {"output_tokens_per_s", "ttft_ms_p95", "gpu_util_pct", "mem_weights", "comm_share",
            "queue_ms_p95", "predicted_tokens_per_s"} <= drawn  # the probe sees what the panels read
    assert sorted(drawn - set(METRICS)) == []


def test_the_charts_and_the_points_table_name_metrics_as_the_catalogue_does() -> None:
    assert UTILISATION_COLUMNS["gpu_util_pct"] == label("gpu_util_pct") == "GPU util (NVML)"
    assert MEMORY_PARTS["weights"] == label("mem_weights")
    assert LATENCY_METRICS["ttft"] == "TTFT" and label("ttft_ms_p95") == "TTFT P95"
    assert TABLE_COLUMNS["ttft_ms_p95"] == header("ttft_ms_p95") == "TTFT P95 ms"
    assert TABLE_COLUMNS["queue_ms_p99"] == "queue P99 ms" and label("queue_ms_p99") == "queue wait P99"
    assert PANEL_UNITS == {"throughput": "tok/s", "latency": "ms", "utilisation": "%", "memory": "GiB"}


def test_every_metric_has_a_direction_and_a_byte_column_is_shown_in_gib() -> None:
    assert {metric.direction for metric in METRICS.values()} <= {"higher", "lower", "neither"}
    assert METRICS["output_tokens_per_s"].direction == "higher" and METRICS["itl_ms_p95"].direction == "lower"
    assert all(METRICS[column].unit == "GiB" for column in columns_stored_as("bytes"))
    assert all(METRICS[column].unit == "%" for column in columns_stored_as("fraction"))
