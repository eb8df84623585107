"""The Altair specs: what each panel plots, the shared hover and axis, markers in all four, overlays."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from batchscope import charts
from batchscope.analysis import SLO, analyse, memory_split, model_facts
from runners.schemas import SUMMARY

GiB = 1024**3
CALIBRATION = {"device": "test GPU", "dtype": "bfloat16", "copy_bytes_per_s": 4.0e12,
               "matmul_flops_per_s": 7.0e14, "source": "spec-table", "key": "test GPU|-|bfloat16"}


def summary_table(points: int = 9, scale: float = 1.0, oom_from: int | None = None) -> pd.DataFrame:
    """Point summaries shaped like a GPU sweep: throughput that saturates, latency that climbs."""
    batch = 2 ** np.arange(points)
    tps = scale * 900 * batch / (1 + batch / 24)
    step = 8 + batch * 0.12
    table = pd.DataFrame({
        "point_index": np.arange(points), "batch_size": batch, "status": "ok", "error": None,
        "prompt_len_mean": 256.0, "output_len_mean": 64.0, "active_tokens_mean": batch * 288.0,
        "active_seqs_mean": batch.astype(float), "decode_step_ms": step, "prefill_ms": 20 + batch * 2.0,
        "output_tokens_per_s": tps, "output_tokens_per_s_min": tps * 0.96, "output_tokens_per_s_max": tps * 1.03,
        "ttft_ms_p50": 20 + batch * 2.0, "ttft_ms_p95": 22 + batch * 2.2, "ttft_ms_p99": 23 + batch * 2.3,
        "itl_ms_p50": step, "itl_ms_p95": step * 1.1, "itl_ms_p99": step * 1.2,
        "e2e_ms_p50": 20 + 64 * step, "e2e_ms_p95": 22 + 70 * step, "e2e_ms_p99": 23 + 72 * step,
        "gpu_util_pct": np.minimum(99.0, 30 + batch * 4.0), "mem_ctrl_util_pct": np.minimum(90.0, 20 + batch),
        "sm_util_pct": np.nan, "tensor_active_pct": np.nan, "dram_bw_util_pct": np.nan, "cpu_pct": np.nan,
        "mem_capacity": 141 * 10**9, "mem_weights": 16 * GiB, "mem_kv_allocated": batch * 40 * 2**20,
        "mem_kv_used": batch * 36 * 2**20, "mem_activations": batch * 8 * 2**20,
        "mem_allocator_reserve": GiB // 2, "mem_other": GiB, "prefill_padding_waste": 0.0,
        "decode_padding_waste": 0.0, "active_tokens_max": batch * 320.0, "repeats": 3, "warmup": 1,
    }).reindex(columns=SUMMARY.names)
    if oom_from is not None:
        oom = table["batch_size"] >= oom_from
        table.loc[oom, "status"] = "oom"
        table.loc[oom, [c for c in table.columns if c.startswith(("output_", "ttft", "itl", "e2e", "mem_k"))]] = np.nan
    return table


@pytest.fixture
def run() -> tuple[pd.DataFrame, object, pd.DataFrame, SLO]:
    points = summary_table(oom_from=256)
    slo = SLO("ttft", 95, 200.0)
    analysis = analyse(points, model_facts("llama-3.1-8b", "bfloat16"), CALIBRATION, slo)
    return points, analysis, memory_split(points), slo


def layers_of(panel: dict, data: dict | None = None) -> list[dict]:
    """Every unit layer of a panel, nested layers flattened, each with the data it draws."""
    found = []
    for layer in panel["layer"]:
        inherited = layer.get("data", panel.get("data", data))
        found += layers_of(layer, inherited) if "layer" in layer else [{**layer, "data": inherited}]
    return found


def mark_type(layer: dict) -> str:
    mark = layer["mark"]
    return mark["type"] if isinstance(mark, dict) else mark


def to_dict(chart) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Altair notes that the shared hover is merged
        return chart.to_dict()


def test_throughput_frame_has_band_and_roofline_and_leaves_oom_points_out(run) -> None:
    _, analysis, _, _ = run
    frame = charts.throughput_frame(analysis.table)
    measured = frame[frame["series"] == "measured"]
    assert measured["x"].tolist() == [1, 2, 4, 8, 16, 32, 64, 128]
    assert (measured["lo"] <= measured["value"]).all() and (measured["value"] <= measured["hi"]).all()
    assert (frame["series"] == "roofline prediction").sum() == 8


def test_latency_frame_reads_the_chosen_percentile_and_rejects_others() -> None:
    table = summary_table(points=3)
    frame = charts.latency_frame(table, 99)
    ttft = frame[frame["series"] == "TTFT P99"]["value"].tolist()
    assert ttft == table["ttft_ms_p99"].tolist()
    assert set(frame["series"]) == {"TTFT P99", "ITL P99", "E2E P99"}
    with pytest.raises(ValueError, match="percentile"):
        charts.latency_frame(table, 90)


def test_utilisation_frame_keeps_only_recorded_sources() -> None:
    frame = charts.utilisation_frame(summary_table(points=4))
    assert set(frame["series"]) == {"GPU util (NVML)", "memory-controller util (NVML)"}
    cpu_run = summary_table(points=4).assign(gpu_util_pct=np.nan, mem_ctrl_util_pct=np.nan, cpu_pct=97.0)
    assert charts.primary_utilisation(cpu_run) == {"cpu_pct": "process CPU %"}


def test_memory_frame_is_in_gib_in_stacking_order(run) -> None:
    _, _, split, _ = run
    frame = charts.memory_frame(split)
    weights = frame[(frame["series"] == "weights") & (frame["x"] == 1)]["value"].item()
    assert weights == pytest.approx(16.0)
    assert frame.sort_values("order")["series"].iloc[0] == "weights"


def test_markers_at_one_batch_share_a_rule_and_oom_points_get_their_own(run) -> None:
    points, analysis, _, _ = run
    markers = charts.marker_frame(analysis, points)
    assert markers["x"].is_unique
    wp = analysis.working_point.x
    assert "working point" in markers.set_index("x").loc[wp, "label"]
    assert markers[markers["kind"] == "OOM"]["x"].tolist() == [256]


def test_linked_charts_share_axis_hover_and_markers_across_four_panels(run) -> None:
    points, analysis, split, slo = run
    spec = to_dict(charts.linked_charts(analysis.table, analysis, slo, memory_split=split))
    panels = spec["vconcat"]
    assert [p["title"] for p in panels][:3] == ["output tokens/s", "latency (ms, log)", "utilisation (%)"]
    assert spec["resolve"]["scale"]["x"] == "shared"
    hover = next(p for p in spec["params"] if p["name"] == "hover")
    assert hover["select"]["nearest"] is True and hover["select"]["on"] == "pointerover"
    owners = [layer["name"] for panel in panels for layer in layers_of(panel)
              if layer.get("name", "").startswith("hover_")]
    assert all(any(name.startswith(f"hover_{panel}") for name in owners)
               for panel in ("throughput", "latency", "utilisation", "memory"))
    assert sorted(hover["views"]) == sorted(owners) and len(owners) == 4
    for panel in panels:
        rules = [layer for layer in layers_of(panel) if mark_type(layer) == "rule" and "strokeDash" in layer["mark"]]
        x = [layer for layer in layers_of(panel) if layer.get("encoding", {}).get("x", {}).get("scale")]
        assert x[0]["encoding"]["x"]["scale"]["type"] == "log" and x[0]["encoding"]["x"]["scale"]["base"] == 2
        marker_data = [spec["datasets"][layer["data"]["name"]] for layer in rules if "data" in layer]
        assert any(any(row.get("kind") == "OOM" for row in data) for data in marker_data)
        assert any(any("working point" in row.get("label", "") for row in data) for data in marker_data)
    slo_rules = [layer for layer in layers_of(panels[1]) if mark_type(layer) == "rule" and "y" in layer["encoding"]]
    assert spec["datasets"][slo_rules[0]["data"]["name"]][0]["value"] == 200.0


def test_capacity_far_above_use_is_named_instead_of_flattening_the_stack() -> None:
    table = summary_table(points=3).assign(mem_capacity=2048 * GiB)
    analysis = analyse(table, None, None)
    spec = to_dict(charts.linked_charts(table, analysis, memory_split=memory_split(table)))
    assert "capacity 2,048.0 GiB is off the scale" in spec["vconcat"][3]["title"]
    near = summary_table(points=3)
    near_spec = to_dict(charts.linked_charts(near, analyse(near, None, None), memory_split=memory_split(near)))
    assert near_spec["vconcat"][3]["title"] == "memory (GiB)"


def test_overlay_of_ten_runs_with_twenty_points_keeps_one_line_per_run_per_panel() -> None:
    tables = {f"run {i}": summary_table(points=20 if i == 0 else 10, scale=1 + i / 4) for i in range(10)}
    analyses = {label: analyse(t, None, None) for label, t in tables.items()}
    splits = {label: memory_split(t) for label, t in tables.items()}
    chart = charts.overlay_charts(tables, analyses, splits, latency_metric="itl", percentile=50)
    spec = to_dict(chart)
    [legend] = [p for p in spec["params"] if p["name"] == "legend"]
    assert legend["bind"] == "legend" and len(legend["views"]) == 1  # one owner: no duplicate signals
    for panel in spec["vconcat"]:
        lines = [layer for layer in layers_of(panel) if mark_type(layer) in ("line", "area")
                 and layer["encoding"].get("color", {}).get("field") == "run"]
        data = pd.DataFrame(spec["datasets"][lines[-1]["data"]["name"]])
        assert data.groupby("run")["series"].nunique().max() == 1
        assert data["run"].nunique() == 10
        assert data["x"].max() == 2**19
    assert charts.axis_values(*tables.values())[-1] == 2**19


def test_empty_panels_say_no_data_instead_of_failing() -> None:
    table = summary_table(points=3).assign(gpu_util_pct=np.nan, mem_ctrl_util_pct=np.nan)
    spec = to_dict(charts.linked_charts(table, analyse(table, None, None)))
    assert spec["vconcat"][2]["title"] == "utilisation (%): no data recorded"
    assert spec["vconcat"][3]["title"] == "memory (GiB): no data recorded"


def test_length_histogram_bins_the_sampled_lengths() -> None:
    spec = to_dict(charts.length_histogram([1, 2, 2, 3], "Prompt length"))
    assert spec["encoding"]["x"]["bin"] == {"maxbins": 40}
    assert len(spec["datasets"][spec["data"]["name"]]) == 4


def test_tensor_parallel_runs_show_the_all_reduce_share_beside_utilisation() -> None:
    table = summary_table(points=3).assign(comm_share=[0.05, 0.10, 0.25])
    frame = charts.utilisation_frame(table)
    assert frame[frame["series"] == charts.COMM_SERIES]["value"].tolist() == [5.0, 10.0, 25.0]
    assert charts.COMM_SERIES not in set(charts.utilisation_frame(summary_table(points=3))["series"])
    # an overlay keeps one utilisation series per run, so it leaves the share out
    assert charts.COMM_SERIES not in set(charts.utilisation_frame(table, columns={"gpu_util_pct": "GPU"})["series"])
