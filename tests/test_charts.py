"""The Altair specs: what each panel plots, the shared hover and axis, markers in all four, overlays."""
from __future__ import annotations

import json
import warnings

import altair as alt
import numpy as np
import pandas as pd
import pytest

from batchscope import charts, units
from batchscope.analysis import SLO, analyse, memory_split, model_facts
from batchscope.analysis.memory import SPLIT_PARTS
from batchscope.charts import frames, layout, palette
from batchscope.explain import charts as explain_charts
from batchscope.units import GiB
from runners.results.schemas import SUMMARY

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


def grid_panels(spec: dict) -> dict[str, dict]:
    """The five panels of linked or overlay charts by name: a 2 × 2 grid, then the trade-off below it."""
    grid, tradeoff = spec["vconcat"]
    (top, bottom) = (row["hconcat"] for row in grid["vconcat"])
    return dict(zip(("throughput", "latency", "utilisation", "memory", "tradeoff"), [*top, *bottom, tradeoff]))


def title(panel: dict) -> str:
    return panel["title"]["text"] if isinstance(panel["title"], dict) else panel["title"]


def mark_type(layer: dict) -> str:
    mark = layer["mark"]
    return mark["type"] if isinstance(mark, dict) else mark


def to_dict(chart) -> dict:
    if isinstance(chart, dict):  # the linked and overlay charts are written as Vega-Lite dicts
        return chart
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Altair notes that the shared hover is merged
        return chart.to_dict()


def test_throughput_frame_has_band_and_roofline_and_leaves_oom_points_out(run) -> None:
    _, analysis, _, _ = run
    frame = frames.throughput_frame(analysis.table)
    measured = frame[frame["series"] == "measured"]
    assert measured["x"].tolist() == [1, 2, 4, 8, 16, 32, 64, 128]
    assert (measured["lo"] <= measured["value"]).all() and (measured["value"] <= measured["hi"]).all()
    assert (frame["series"] == "roofline prediction").sum() == 8


def test_latency_frame_reads_the_chosen_percentile_and_rejects_others() -> None:
    table = summary_table(points=3)
    frame = frames.latency_frame(table, 99)
    ttft = frame[frame["series"] == "TTFT P99"]["value"].tolist()
    assert ttft == table["ttft_ms_p99"].tolist()
    assert set(frame["series"]) == {"TTFT P99", "ITL P99", "E2E P99"}
    with pytest.raises(ValueError, match="percentile"):
        frames.latency_frame(table, 90)


def test_utilisation_frame_keeps_only_recorded_sources() -> None:
    frame = frames.utilisation_frame(summary_table(points=4))
    assert set(frame["series"]) == {"GPU util (NVML)", "memory-controller util (NVML)"}
    cpu_run = summary_table(points=4).assign(gpu_util_pct=np.nan, mem_ctrl_util_pct=np.nan, cpu_pct=97.0)
    assert frames.primary_utilisation(cpu_run) == {"cpu_pct": "process CPU % (100 = one core)"}


def test_memory_frame_is_in_gib_in_stacking_order(run) -> None:
    _, _, split, _ = run
    frame = frames.memory_frame(split)
    weights = frame[(frame["series"] == "weights") & (frame["x"] == 1)]["value"].item()
    assert weights == pytest.approx(16.0)
    assert frame.sort_values("order")["series"].iloc[0] == "weights"


def test_markers_at_one_batch_share_a_rule_and_oom_points_get_their_own(run) -> None:
    points, analysis, _, _ = run
    markers = frames.marker_frame(analysis, points)
    assert markers["x"].is_unique
    wp = analysis.working_point.x
    assert "working point" in markers.set_index("x").loc[wp, "label"]
    assert markers[markers["kind"] == "OOM"]["x"].tolist() == [256]


def test_linked_charts_share_axis_hover_and_markers_across_four_panels(run) -> None:
    points, analysis, split, slo = run
    spec = to_dict(charts.linked_charts(analysis.table, analysis, slo, memory_split=split))
    panels = grid_panels(spec)
    assert [title(p) for p in panels.values()][1:3] == ["latency (ms, log)", "utilisation (%)"]
    assert title(panels["throughput"]).startswith("output tokens/s")
    assert spec["vconcat"][0]["resolve"]["scale"]["x"] == "shared"
    hover = next(p for p in spec["params"] if p["name"] == "hover")
    assert hover["select"]["nearest"] is True and hover["select"]["on"] == "pointerover"
    owners = [layer["name"] for panel in panels.values() for layer in layers_of(panel)
              if layer.get("name", "").startswith("hover_")]
    assert all(any(name.startswith(f"hover_{panel}") for name in owners) for panel in panels)
    assert sorted(hover["views"]) == sorted(owners) and len(owners) == 5
    for name in ("throughput", "latency", "utilisation", "memory"):
        panel = panels[name]
        rules = [layer for layer in layers_of(panel) if mark_type(layer) == "rule" and "strokeDash" in layer["mark"]]
        x = [layer for layer in layers_of(panel) if layer.get("encoding", {}).get("x", {}).get("scale")]
        assert x[0]["encoding"]["x"]["scale"]["type"] == "log" and x[0]["encoding"]["x"]["scale"]["base"] == 2
        marker_data = [spec["datasets"][layer["data"]["name"]] for layer in rules if "data" in layer]
        assert any(any(row.get("kind") == "OOM" for row in data) for data in marker_data)
        assert any(any("working point" in row.get("label", "") for row in data) for data in marker_data)
    slo_rules = [layer for layer in layers_of(panels["latency"]) if mark_type(layer) == "rule" and "y" in layer["encoding"]]
    assert spec["datasets"][slo_rules[0]["data"]["name"]][0]["value"] == 200.0


def test_linked_and_overlay_specs_are_valid_vega_lite(run) -> None:
    points, analysis, split, slo = run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        alt.VConcatChart.from_dict(charts.linked_charts(analysis.table, analysis, slo, memory_split=split))
        alt.VConcatChart.from_dict(charts.overlay_charts({"a": analysis.table, "b": analysis.table},
                                                         {"a": analysis, "b": analysis}, {"a": split, "b": split}, slo))


def test_the_tooltip_lives_on_the_layer_that_takes_the_pointer_and_names_run_series_batch_value(run) -> None:
    points, analysis, split, slo = run
    spec = to_dict(charts.linked_charts(analysis.table, analysis, slo, memory_split=split, run="llama bf16"))
    for name, panel in grid_panels(spec).items():
        data_layers = layers_of(panel["layer"][0], panel.get("data")) if name != "tradeoff" else layers_of(panel)
        owner = data_layers[-1]  # drawn last: Vega-Lite's nearest-point cells take the pointer over every mark
        assert owner["name"].startswith(f"hover_{name}") and owner["mark"]["opacity"] == 0
        fields = [t["field"] for t in owner["encoding"]["tooltip"]]
        assert fields[0] == "run" and "x" in fields and "shown" in fields
        rows = pd.DataFrame(spec["datasets"][owner["data"]["name"]])
        assert (rows["run"] == "llama bf16").all()
    throughput = frames.throughput_frame(analysis.table, "r")
    assert throughput["shown"].iloc[0] == "1 tok/s" or throughput["shown"].str.endswith(" tok/s").all()
    assert throughput[throughput["series"] == "measured"]["note"].str.startswith("repeats ").all()
    assert frames.memory_frame(split)["shown"].iloc[0] == "16.00 GiB"
    assert [units.value_text(v, u) for v, u in ((3582.4, "tok/s"), (1.8712, "ms"), (97.46, "%"), (0.09375, "GiB"))] \
        == ["3 582 tok/s", "1.87 ms", "97.5 %", "96 MiB"]


def test_a_roofline_far_above_the_measured_curve_does_not_set_the_throughput_axis() -> None:
    slow = summary_table(points=6, scale=0.02)  # an engine at ~2 % of the roofline, like hf-generate
    analysis = analyse(slow, model_facts("llama-3.1-8b", "bfloat16"), CALIBRATION)
    spec = to_dict(charts.linked_charts(analysis.table, analysis, memory_split=memory_split(slow)))
    panel = grid_panels(spec)["throughput"]
    measured_top = max(slow["output_tokens_per_s_max"])
    domains = {tuple(layer["encoding"]["y"]["scale"]["domain"]) for layer in layers_of(panel["layer"][0])
               if "domain" in layer["encoding"].get("y", {}).get("scale", {})}
    assert len(domains) == 1 and domains.pop() == (0, pytest.approx(measured_top * layout.OFF_SCALE))
    assert "roofline prediction (up to" in title(panel) and "off the scale" in title(panel)
    assert all(layer["mark"].get("clip") for layer in layers_of(panel["layer"][0]) if mark_type(layer) == "line")
    fast = analyse(summary_table(points=6), model_facts("llama-3.1-8b", "bfloat16"),
                   {**CALIBRATION, "copy_bytes_per_s": 1.0e11})  # a roofline below the measured curve
    fast_panel = grid_panels(to_dict(charts.linked_charts(fast.table, fast)))["throughput"]
    assert title(fast_panel) == "output tokens/s"


def test_panels_fill_two_columns_and_marker_labels_never_overlap(run) -> None:
    points, analysis, split, slo = run
    spec = to_dict(charts.linked_charts(analysis.table, analysis, slo, memory_split=split))
    assert [len(row["hconcat"]) for row in spec["vconcat"][0]["vconcat"]] == [2, 2]
    assert 2 * layout.PANEL_WIDTH + 2 * 80 <= 1280  # the content width of a 1440 px window
    crowded = pd.DataFrame({"run": "", "x": [8.0, 16.0, 32.0, 64.0, 256.0, 512.0],
                            "kind": ["kneedle", "plateau", "SLO limit", "working point", "OOM", "OOM"],
                            "label": ["Kneedle", "plateau", "SLO limit", "working point", "OOM", "OOM"]})
    placed = layout.label_rows(crowded, layout.log_domain([1.0, 512.0]))
    assert placed["label"].tolist().count("OOM") == 1  # a run of OOM rules is labelled once
    spans = []
    for row in placed.itertuples():
        at = layout.PANEL_WIDTH * (np.log2(row.x) - np.log2(0.8)) / (np.log2(640) - np.log2(0.8))
        size = layout.LABEL_CHAR_PX * len(row.label) + 6
        spans.append((row.row, *((at - size, at) if row.align == "right" else (at, at + size))))
        assert 0 <= spans[-1][1] and spans[-1][2] <= layout.PANEL_WIDTH
    for i, a in enumerate(spans):
        for b in spans[i + 1:]:
            assert a[0] != b[0] or a[2] < b[1] or b[2] < a[1], (a, b)
    labelled = [p for p in grid_panels(spec).values()
                if any(mark_type(layer) == "text" and layer["encoding"].get("color", {}).get("field") == "kind"
                       for layer in layers_of(p) if "encoding" in layer)]
    assert len(labelled) == 1  # marker labels above the throughput panel only


def test_memory_has_one_colour_per_part_on_every_page_listed_in_stack_order(run) -> None:
    points, analysis, split, _ = run
    assert list(palette.MEMORY_COLOURS) == [frames.MEMORY_PARTS[p] for p in SPLIT_PARTS]
    split_parts = list(palette.MEMORY_COLOURS)[:-1]  # this GPU run has every part of the split, no device count
    expected = (split_parts, [palette.MEMORY_COLOURS[part] for part in split_parts])
    specs = {"run": grid_panels(to_dict(charts.linked_charts(analysis.table, analysis, memory_split=split)))["memory"],
             "history": to_dict(charts.memory_split_by_run({"a": split})),
             "explain": to_dict(explain_charts.memory_chart(analysis.table, split))}
    for page, spec in specs.items():
        colours = [layer["encoding"]["color"] for layer in layers_of(spec) if
                   layer.get("encoding", {}).get("color", {}).get("field") == "series"] \
            if "layer" in spec else [spec["spec"]["encoding"]["color"]]
        assert colours and all((c["scale"]["domain"], c["scale"]["range"]) == expected for c in colours), page
        assert all(c.get("sort") == expected[0] for c in colours), page


def test_the_tradeoff_sets_throughput_against_each_users_speed_with_markers_ringed(run) -> None:
    points, analysis, split, slo = run
    frame = frames.tradeoff_frame(analysis.table, "r")
    ok = analysis.table[analysis.table["status"] == "ok"]
    assert frame["x"].tolist() == ok["x"].tolist()
    assert frame["speed"].tolist() == pytest.approx((1000 / ok["itl_ms_p50"]).tolist())
    panel = grid_panels(to_dict(charts.linked_charts(analysis.table, analysis, slo, memory_split=split)))["tradeoff"]
    assert panel["layer"][0]["encoding"]["x"]["field"] == "speed"
    spec = charts.linked_charts(analysis.table, analysis, slo, memory_split=split)
    rings = [layer for layer in layers_of(grid_panels(spec)["tradeoff"]) if mark_type(layer) == "point" and
             layer["encoding"].get("color", {}).get("field") == "kind"]
    ringed = pd.DataFrame(spec["datasets"][rings[0]["data"]["name"]])
    assert analysis.working_point.x in set(ringed["x"]) and analysis.slo_limit.x in set(ringed["x"])
    assert frames.tradeoff_frame(analysis.table.drop(columns=["itl_ms_p50"])).empty


def test_capacity_far_above_use_is_named_instead_of_flattening_the_stack() -> None:
    table = summary_table(points=3).assign(mem_capacity=2048 * GiB)
    analysis = analyse(table, None, None)
    spec = to_dict(charts.linked_charts(table, analysis, memory_split=memory_split(table)))
    assert "capacity 2,048.0 GiB is off the scale" in title(grid_panels(spec)["memory"])
    near = summary_table(points=3)
    near_spec = to_dict(charts.linked_charts(near, analyse(near, None, None), memory_split=memory_split(near)))
    assert title(grid_panels(near_spec)["memory"]) == "memory (GiB)"


def test_overlay_of_ten_runs_with_twenty_points_keeps_one_line_per_run_per_panel() -> None:
    tables = {f"run {i}": summary_table(points=20 if i == 0 else 10, scale=1 + i / 4) for i in range(10)}
    analyses = {label: analyse(t, None, None) for label, t in tables.items()}
    splits = {label: memory_split(t) for label, t in tables.items()}
    chart = charts.overlay_charts(tables, analyses, splits, latency_metric="itl", percentile=50)
    spec = to_dict(chart)
    [legend] = [p for p in spec["params"] if p["name"] == "legend"]
    assert legend["bind"] == "legend" and len(legend["views"]) == 1  # one owner: no duplicate signals
    for name, panel in grid_panels(spec).items():
        lines = [layer for layer in layers_of(panel) if mark_type(layer) in ("line", "area")
                 and layer["encoding"].get("color", {}).get("field") == "run"]
        data = pd.DataFrame(spec["datasets"][lines[-1]["data"]["name"]])
        assert data["run"].nunique() == 10
        if name != "tradeoff":
            assert data.groupby("run")["series"].nunique().max() == 1
            assert data["x"].max() == 2**19
    legends = [layer["encoding"]["color"].get("legend", {}) for panel in grid_panels(spec).values()
               for layer in layers_of(panel) if layer.get("encoding", {}).get("color", {}).get("field") == "run"]
    assert sum(legend is not None for legend in legends) >= 1 and any(legend is None for legend in legends)
    assert frames.axis_values(*tables.values())[-1] == 2**19


def test_empty_panels_say_no_data_instead_of_failing() -> None:
    table = summary_table(points=3).assign(gpu_util_pct=np.nan, mem_ctrl_util_pct=np.nan)
    panels = grid_panels(to_dict(charts.linked_charts(table, analyse(table, None, None))))
    assert title(panels["utilisation"]) == "utilisation (%): no data recorded"
    assert title(panels["memory"]) == "memory (GiB): no data recorded"


def scaled_y(panel: dict) -> list[dict]:
    """The encodings of a panel's layers that carry the y scale."""
    return [layer["encoding"] for layer in layers_of(panel) if "scale" in layer.get("encoding", {}).get("y", {})]


def test_an_empty_panel_without_a_level_line_has_no_numbers_and_no_legend() -> None:
    """Vega wrote "0.000000" beside an empty scale, under a legend of parts not drawn (the memory panel of an
    endpoint run, whose memory is its server's); a level line (capacity, SLO) keeps the axis's numbers."""
    table = summary_table(points=3).assign(gpu_util_pct=np.nan, mem_ctrl_util_pct=np.nan, mem_capacity=np.nan)
    panels = grid_panels(to_dict(charts.linked_charts(table, analyse(table, None, None))))
    for name in ("utilisation", "memory"):
        drawn = scaled_y(panels[name])
        assert drawn and all(e["y"]["scale"]["domain"] == [0, 1] and e["y"]["axis"] == {"labels": False, "ticks": False}
                             for e in drawn)
        assert all(e["color"]["legend"] is None for e in drawn if "color" in e)
    assert all("axis" not in e["y"] for e in scaled_y(panels["throughput"]))
    capacity = summary_table(points=3)  # no memory split given, but the capacity line is drawn
    memory = grid_panels(to_dict(charts.linked_charts(capacity, analyse(capacity, None, None))))["memory"]
    assert title(memory) == "memory (GiB): no data recorded"
    assert all("axis" not in e["y"] and e["y"]["scale"].get("domain") != [0, 1] for e in scaled_y(memory))


def test_an_endpoint_runs_memory_panel_stacks_its_servers_gpu_count_under_its_capacity() -> None:
    """No split (the model runs in the server): one part, NVML's count, the only name in the legend."""
    split_columns = ("mem_weights", "mem_kv_allocated", "mem_kv_used", "mem_activations", "mem_allocator_reserve",
                     "mem_other")
    table = summary_table(points=3).assign(**{c: np.nan for c in split_columns},
                                           mem_nvml_used=[120 * GiB, 121 * GiB, 121 * GiB], mem_capacity=140 * GiB)
    spec = to_dict(charts.linked_charts(table, analyse(table, None, None), memory_split=memory_split(table)))
    memory = grid_panels(spec)["memory"]
    colours = [e["color"] for e in scaled_y(memory) if e.get("color", {}).get("field") == "series"]
    nvml = palette.MEMORY_COLOURS["memory in use (NVML)"]
    assert colours and all(c["scale"] == {"domain": ["memory in use (NVML)"], "range": [nvml]} for c in colours)
    assert nvml not in [colour for name, colour in palette.MEMORY_COLOURS.items() if name != "memory in use (NVML)"]
    assert title(memory) == "memory (GiB)" and "capacity 140.0 GiB" in json.dumps(spec["datasets"])


def test_length_histogram_bins_the_sampled_lengths() -> None:
    spec = to_dict(charts.length_histogram([1, 2, 2, 3], "Prompt length"))
    assert spec["encoding"]["x"]["bin"] == {"maxbins": 40, "minstep": 1, "extent": [1, 4]}  # whole tokens, 1 to 3
    assert spec["encoding"]["x"]["axis"]["format"] == "d"
    assert len(spec["datasets"][spec["data"]["name"]]) == 4
    assert to_dict(charts.length_histogram([128] * 5, "Prompt length"))["encoding"]["x"]["bin"]["extent"] == [128, 129]


def test_tensor_parallel_runs_show_the_all_reduce_share_beside_utilisation() -> None:
    table = summary_table(points=3).assign(comm_share=[0.05, 0.10, 0.25])
    frame = frames.utilisation_frame(table)
    assert frame[frame["series"] == frames.COMM_SERIES]["value"].tolist() == [5.0, 10.0, 25.0]
    assert frames.COMM_SERIES not in set(frames.utilisation_frame(summary_table(points=3))["series"])
    # an overlay keeps one utilisation series per run, so it leaves the share out
    assert frames.COMM_SERIES not in set(frames.utilisation_frame(table, columns={"gpu_util_pct": "GPU"})["series"])


def test_a_run_on_two_gpus_draws_each_gpus_utilisation_instead_of_their_mean() -> None:
    table = summary_table(points=2)
    per_gpu = pd.DataFrame({"point_index": [0, 0, 1, 1], "gpu_index": [0, 1, 0, 1],
                            "gpu_util_pct": [95.0, 60.0, 99.0, 97.0]})
    frame = frames.utilisation_frame(table, per_gpu=per_gpu)
    assert "GPU util (NVML)" not in set(frame["series"])
    assert frame[frame["series"] == "GPU util (NVML), GPU 1"][["x", "value"]].values.tolist() == [[1, 60.0], [2, 97.0]]
    one_gpu = per_gpu[per_gpu["gpu_index"] == 0]
    assert set(frames.utilisation_frame(table, per_gpu=one_gpu)["series"]) == {"GPU util (NVML)",
                                                                              "memory-controller util (NVML)"}


def test_overlay_marker_labels_name_the_marker_not_the_run_and_say_it_once() -> None:
    tables = {f"a long run label {i}": summary_table(points=6, oom_from=32) for i in range(2)}
    spec = charts.overlay_charts(tables, {k: analyse(t, None, None) for k, t in tables.items()})
    texts = [row["label"] for panel in grid_panels(spec).values() for layer in layers_of(panel)
             if mark_type(layer) == "text" and layer["encoding"].get("color", {}).get("field") == "run"
             for row in spec["datasets"][layer["data"]["name"]]]
    assert sorted(texts) == ["OOM", "working point"]


def test_every_mark_of_an_overlaid_run_takes_that_runs_one_colour() -> None:
    tables = {"bf16": summary_table(points=6, oom_from=32), "fp8": summary_table(points=6)}
    spec = charts.overlay_charts(tables, {k: analyse(t, None, None) for k, t in tables.items()})
    scales = [layer["encoding"]["color"]["scale"] for panel in [*grid_panels(spec).values()]
              for layer in layers_of(panel) if layer["encoding"].get("color", {}).get("field") == "run"]
    rules = [layer for layer in layers_of(grid_panels(spec)["throughput"]) if mark_type(layer) == "rule"
             and layer["encoding"].get("color", {}).get("field") == "run"]
    assert rules, "the working point and OOM rules are coloured by run"
    assert scales and all(scale == {"domain": ["bf16", "fp8"], "range": ["#4c78a8", "#f58518"]} for scale in scales)


def test_a_roofline_near_the_measured_curve_keeps_its_full_height() -> None:
    frame = pd.DataFrame({"run": "", "x": [1.0, 2.0, 1.0, 2.0], "series": ["measured"] * 2 + ["roofline prediction"] * 2,
                          "value": [100.0, 180.0, 150.0, 260.0], "lo": [95.0, 170.0, None, None],
                          "hi": [105.0, 190.0, None, None]})
    assert layout.throughput_top("throughput", frame) is None  # 1.4× the best: readable together
    far = frame.assign(value=[100.0, 180.0, 2000.0, 4000.0])
    assert layout.throughput_top("throughput", far) == pytest.approx(190.0 * layout.OFF_SCALE)


def test_home_shows_each_latest_runs_best_throughput() -> None:
    runs = pd.DataFrame({"run_id": ["a", "b"], "name": ["one point", None], "state": ["cancelled", "done"],
                         "points_ok": [0, 9], "best_output_tokens_per_s": [None, 4201.3]})
    spec = charts.best_throughput_chart(runs)
    rows = spec["data"]["values"]
    assert [(r["label"], r["best"], r["shown"]) for r in rows] == [("one point", 0.0, "no finished point"),
                                                                   ("b", 4201.3, "4 201 tok/s")]
    assert spec["encoding"]["x"]["field"] == "best" and spec["height"] == {"step": 22}
    assert spec["encoding"]["x"]["scale"]["domain"] == [0.0, 4201.3]  # never computed from a dataset in flight
    assert spec["autosize"] == {"type": "pad"}  # a bar per row cannot also fit its container's height


def test_a_panels_y_domain_is_its_datas_with_its_level_lines_and_stack_totals() -> None:
    frame = pd.DataFrame({"run": "r", "x": [1, 1, 2, 2], "value": [3.0, 4.0, 5.0, 1.0], "hi": [6.0, None, 2.0, None]})
    assert layout.value_domain(frame) == [0.0, 5.0]
    assert layout.value_domain(frame, ("value", "hi")) == [0.0, 6.0]  # the repeat band's top counts
    assert layout.value_domain(frame, stacked=True) == [0.0, 7.0]  # the stack at x = 1 is 3 + 4
    assert layout.value_domain(frame, stacked=True, levels=(9.5,)) == [0.0, 9.5]  # a capacity line above it
    assert layout.value_domain(frame.assign(value=[0.0, 20.0, 0.5, 40.0]), levels=(200.0,), log=True) == [0.5, 200.0]
    assert layout.value_domain(frame.iloc[:0]) is None and layout.value_domain(frame.assign(value=0.0), log=True) is None


def test_every_data_scale_of_the_linked_charts_has_its_domain_fixed(run) -> None:
    """Streamlit redraws a chart whose spec changed (the window's width) with its datasets briefly empty; a scale
    that computed its domain from one logged 'Infinite extent' in the browser's console then."""
    points, analysis, split, slo = run
    spec = to_dict(charts.linked_charts(analysis.table, analysis, slo, memory_split=split))
    for name, panel in grid_panels(spec).items():
        for channel in ("x", "y"):
            scales = [layer["encoding"][channel].get("scale") for layer in layers_of(panel)
                      if layer.get("encoding", {}).get(channel, {}).get("type") == "quantitative"]
            given = [scale for scale in scales if scale]  # a layer with none shares the panel's (a level line)
            assert given and all("domain" in scale for scale in given), (name, channel, given)
    latency = {tuple(layer["encoding"]["y"]["scale"]["domain"]) for layer in layers_of(grid_panels(spec)["latency"])
               if layer.get("encoding", {}).get("y", {}).get("field") == "value" and "scale" in layer["encoding"]["y"]}
    assert len(latency) == 1 and latency.pop()[1] >= 200.0  # the SLO line (200 ms) stays in view


# ---- presentation v2 (issue 34): one colour per series, 0–100 % utilisation, CPU runs said as CPU ----

def colour_scales(panel: dict) -> dict[str, str]:
    """Series → colour over every unit layer of a panel that colours by series with an explicit scale."""
    found: dict[str, str] = {}
    for layer in layers_of(panel):
        scale = (layer.get("encoding", {}).get("color") or {}).get("scale") or {}
        if (layer.get("encoding", {}).get("color") or {}).get("field") == "series" and "domain" in scale:
            found.update(zip(scale["domain"], scale["range"]))
    return found


def test_every_series_keeps_one_colour_and_the_roofline_shares_none(run) -> None:
    points, analysis, split, slo = run
    panels = grid_panels(charts.linked_charts(analysis.table, analysis, slo, memory_split=split))
    latency, throughput = colour_scales(panels["latency"]), colour_scales(panels["throughput"])
    assert latency["ITL P95"] != latency["roofline decode step"] == palette.ROOFLINE  # once one orange served both
    assert throughput["roofline prediction"] == palette.ROOFLINE and throughput["measured"] == "#4c78a8"
    assert latency["TTFT P95"] == palette.series_colour("TTFT P50")  # a metric's colour at every percentile
    measured = [colour for start, colour in palette.SERIES_COLOURS if start != "roofline"]
    assert palette.ROOFLINE not in measured and palette.ROOFLINE not in palette.MARKER_COLOURS.values()
    assert len({palette.series_colour(s) for s in ("TTFT P95", "queue wait (in TTFT) P95", "ITL P95", "E2E P95",
                                                   "roofline decode step")}) == 5
    explain = explain_charts.latency_chart(points).to_dict()
    explain_scale = next(layer["encoding"]["color"]["scale"] for layer in layers_of(explain)
                         if (layer.get("encoding", {}).get("color") or {}).get("field") == "series")
    assert dict(zip(explain_scale["domain"], explain_scale["range"]))["ITL P95"] == latency["ITL P95"]
    legends = [layer["encoding"]["color"].get("legend") for layer in layers_of(explain)
               if (layer.get("encoding", {}).get("color") or {}).get("field") == "series"]
    assert len(legends) == 2 and legends[0] == legends[1] is not None  # line and points: one legend, drawn once,
    assert any(len(child.get("layer", [])) == 2 for child in explain["layer"])  # as one layer of the panel's own


def test_queue_wait_is_drawn_dashed_over_the_ttft_it_belongs_to() -> None:
    assert palette.is_dashed("queue wait (in TTFT) P95") and not palette.is_dashed("TTFT P95")
    assert palette.dash_test(["TTFT P95", "queue wait (in TTFT) P95", "roofline decode step"]) == (
        "datum.series === 'queue wait (in TTFT) P95' || datum.series === 'roofline decode step'")
    assert palette.dash_test(["TTFT P95"]) == "false"


def test_a_cpu_run_draws_its_cpu_share_on_0_to_100_and_no_activation_part() -> None:
    table = summary_table(points=3).assign(gpu_util_pct=np.nan, mem_ctrl_util_pct=np.nan,
                                           cpu_pct=[120.0, 180.0, 196.0])  # 2 cores: up to 200 per process
    frame = frames.utilisation_frame(table, cpu_cores=2)
    assert set(frame["series"]) == {"process CPU (% of 2 cores)"} and frame["value"].tolist() == [60.0, 90.0, 98.0]
    analysis = analyse(table, None, None)
    spec = charts.linked_charts(table, analysis, memory_split=memory_split(table), cpu_cores=2, on_gpu=False)
    panels = grid_panels(spec)
    hover = next(layer for layer in layers_of(panels["utilisation"]) if layer.get("name") == "hover_utilisation")
    assert hover["encoding"]["y"]["scale"]["domain"] == [0, 100.0]
    assert title(panels["utilisation"]).startswith("CPU utilisation (%)")
    memory_parts = {row["series"] for name, rows in spec["datasets"].items() for row in rows if "order" in row}
    assert "activations + workspace" not in memory_parts and "weights" in memory_parts
    assert "activations are not told apart" in title(panels["memory"])
    gpu = grid_panels(charts.linked_charts(summary_table(points=3), analyse(summary_table(points=3), None, None),
                                           memory_split=memory_split(summary_table(points=3))))
    assert "activations" not in title(gpu["memory"]) and title(gpu["utilisation"]) == "utilisation (%)"


def test_a_cpu_runs_cost_line_says_nothing_per_gpu() -> None:
    from batchscope.analysis.cost import at_working_point
    table = analyse(summary_table(points=3), None, None).table
    marker = analyse(summary_table(points=3), None, None).working_point
    assert "per GPU" in at_working_point(table, marker, None)
    cpu = at_working_point(table, marker, None, on_gpu=False)
    assert "GPU" not in cpu and cpu.endswith("set a price per hour to read its cost.")
    assert "per hour of the machine" in at_working_point(table, marker, 2.0, on_gpu=False)


def test_the_grid_uses_the_window_width_it_has() -> None:
    assert layout.panel_width(None) == layout.PANEL_WIDTH == 540  # before the browser says its width
    assert layout.panel_width(1440) == 540 and layout.panel_width(1280) == 540  # never narrower than at 1440
    assert layout.panel_width(1920) == 780  # (1920 − (1440 − 2 × 540)) / 2: the 480 px more, shared by two
    # up to this width the panels are as before the browser said it, so the page is not told (present_keys)
    assert layout.panel_width(layout.WIDEST_DEFAULT_WINDOW) == 540 < layout.panel_width(layout.WIDEST_DEFAULT_WINDOW + 1)
    table = summary_table(points=3)
    panels = grid_panels(charts.linked_charts(table, analyse(table, None, None), width=780))
    assert {panel["width"] for panel in panels.values()} == {780}
    overlaid = grid_panels(charts.overlay_charts({"a": table, "b": summary_table(points=4)}, width=780))
    assert {panel["width"] for panel in overlaid.values()} == {780}  # History's overlay: the same grid


def test_present_mode_wraps_a_bottom_legend_into_the_columns_its_panel_holds() -> None:
    # at font 15 a legend entry is 18 ems of the 14 px label font: 252 px, its label cut at 252 - 2 × 15 = 222 px
    frame = pd.DataFrame({"x": [1, 2], "series": ["a", "b"], "value": [1.0, 2.0], "dashed": [False, False]})
    chart = alt.layer(*explain_charts.lines(frame, alt.X("x:Q"), "y"))
    one = explain_charts.resize(chart, 600, 400, font=15).to_dict()["config"]["legend"]
    assert (one["columns"], one["labelLimit"], one["labelFontSize"]) == (2, 222, 14)  # 600 // 252
    two = explain_charts.resize(alt.hconcat(chart, chart), 600, 400, font=15).to_dict()["config"]["legend"]
    assert two["columns"] == 1  # each of two panels gets 300 px: one entry a row


def test_a_step_on_the_page_wraps_its_legend_so_no_series_name_is_cut() -> None:
    # the page's panel is 720 px: 12 px labels make an entry 216 px, so 3 columns, each label cut past 190 px,
    # about 34 characters of 0.55 em, longer than the longest series name
    table = summary_table(points=3)
    spec = explain_charts.utilisation_chart(table).to_dict()
    legend = spec["config"]["legend"]
    assert (legend["columns"], legend["labelLimit"], legend["labelFontSize"]) == (3, 190, 12)
    longest = max(len(name) for name in [*palette.MEMORY_COLOURS, "throughput (% of its best)"])
    assert longest * 0.55 * legend["labelFontSize"] < legend["labelLimit"]
    # present mode sets its own: the page's setting does not stay behind in the bigger chart
    assert explain_charts.resize(explain_charts.utilisation_chart(table), 1300, 600, 17).to_dict()[
        "config"]["legend"]["columns"] == 4  # 1300 // (18 × 16)
