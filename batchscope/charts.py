"""Altair specs for the four linked charts: throughput, latency, utilisation and memory vs batch size.

All four panels share one log2 x axis and one hover selection, so pointing at a batch in any panel
highlights it in every panel. x is the run's sweep axis (`analysis.axis.sweep_x`): the batch size of a
static sweep, or a continuous sweep's max_num_seqs, concurrency or arrival rate. Knee markers and the working point are vertical rules drawn in all
four. The frames are built in pandas first (testable without a browser); Altair only draws them.
No streamlit import here: pages decide where a chart goes.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import altair as alt
import pandas as pd

from batchscope.analysis.axis import AXES, axes_of, sweep_x

PANEL_WIDTH = 700
PANEL_HEIGHT = 190
GiB = 1024**3
PERCENTILES = (50, 95, 99)
LATENCY_METRICS = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E"}
QUEUE_SERIES = "queue wait (in TTFT)"
UTILISATION_COLUMNS = {
    "gpu_util_pct": "GPU util (NVML)",
    "mem_ctrl_util_pct": "memory-controller util (NVML)",
    "sm_util_pct": "SM util (GPM)",
    "tensor_active_pct": "tensor active (GPM)",
    "dram_bw_util_pct": "DRAM bandwidth util (GPM)",
    "cpu_pct": "process CPU %",
}
COMM_SERIES = "all-reduce share of decode step (tensor parallel)"
MEMORY_PARTS = {"weights": "weights", "kv_used": "KV cache (used)", "kv_unused": "KV cache (allocated, unused)",
                "activations": "activations + workspace", "allocator_reserve": "allocator reserve",
                "other": "CUDA context + other"}
MARKER_COLOURS = {"plateau": "#1b9e77", "kneedle": "#7570b3", "SLO limit": "#d95f02",
                  "working point": "#e7298a", "OOM": "#d62728"}
MARKER_ATTRIBUTES = (("plateau", "plateau"), ("kneedle", "kneedle"), ("slo_limit", "SLO limit"),
                     ("working_point", "working point"))


def hover_selection() -> alt.Parameter:
    """The one selection every panel shares: the x (batch size, say) nearest to the pointer."""
    return alt.selection_point(name="hover", fields=["x"], on="pointerover", nearest=True,
                               clear="pointerout", empty=False)


def axis_values(*tables: pd.DataFrame) -> list[float]:
    """Every x any points table holds: the tick values of the shared axis."""
    values: set[float] = set()
    for table in tables:
        if "batch_size" in table:
            values.update(float(x) for x in sweep_x(table).dropna())
    return sorted(values)


def throughput_frame(table: pd.DataFrame, run: str = "") -> pd.DataFrame:
    """Long frame: measured output tokens/s with its min–max repeat band, and the roofline prediction."""
    rows = []
    ok = _ok_points(table)
    if "output_tokens_per_s" in ok:
        rows.append(pd.DataFrame({
            "x": ok["x"], "series": "measured", "value": ok["output_tokens_per_s"],
            "lo": ok.get("output_tokens_per_s_min", ok["output_tokens_per_s"]),
            "hi": ok.get("output_tokens_per_s_max", ok["output_tokens_per_s"])}))
    if "predicted_tokens_per_s" in ok:
        rows.append(pd.DataFrame({"x": ok["x"], "series": "roofline prediction",
                                  "value": ok["predicted_tokens_per_s"]}))
    return _finish(rows, run)


def latency_frame(table: pd.DataFrame, percentile: int = 95, run: str = "",
                  metrics: tuple[str, ...] = tuple(LATENCY_METRICS)) -> pd.DataFrame:
    """Long frame: TTFT/ITL/E2E at one percentile, plus the roofline-predicted decode step.

    The prediction is a decode step time, so it is comparable with ITL only; it is drawn when ITL is.
    With TTFT, an online-serving run also gets its queue wait (arrival → admission, part of its TTFT);
    a zero wait has no place on the log axis and is left out.
    """
    if percentile not in PERCENTILES:
        raise ValueError(f"percentile must be one of {PERCENTILES}, got {percentile}")
    ok = _ok_points(table)
    rows = []
    for metric in metrics:
        column = f"{metric}_ms_p{percentile}"
        if column in ok:
            rows.append(pd.DataFrame({"x": ok["x"],
                                      "series": f"{LATENCY_METRICS[metric]} P{percentile}",
                                      "value": ok[column]}))
    queue = f"queue_ms_p{percentile}"
    if "ttft" in metrics and queue in ok and ok[queue].notna().any():
        rows.append(pd.DataFrame({"x": ok["x"], "series": f"{QUEUE_SERIES} P{percentile}", "value": ok[queue]}))
    if "itl" in metrics and "predicted_step_ms" in ok:
        rows.append(pd.DataFrame({"x": ok["x"], "series": "roofline decode step",
                                  "value": ok["predicted_step_ms"]}))
    frame = _finish(rows, run)
    return frame[frame["value"] > 0]


def utilisation_frame(table: pd.DataFrame, run: str = "", columns: Mapping[str, str] | None = None
                      ) -> pd.DataFrame:
    """Long frame of every utilisation metric the run recorded (absent sources are left out), and with
    tensor parallelism the all-reduce's share of the decode step in %, the time no GPU computes."""
    ok = _ok_points(table)
    rows = [pd.DataFrame({"x": ok["x"], "series": label, "value": ok[column]})
            for column, label in (columns or UTILISATION_COLUMNS).items()
            if column in ok and ok[column].notna().any()]
    if columns is None and "comm_share" in ok and ok["comm_share"].notna().any():
        rows.append(pd.DataFrame({"x": ok["x"], "series": COMM_SERIES, "value": 100.0 * ok["comm_share"]}))
    return _finish(rows, run)


def primary_utilisation(table: pd.DataFrame) -> dict[str, str]:
    """The one utilisation metric an overlay shows per run: GPU util when recorded, else process CPU %."""
    for column in ("gpu_util_pct", "cpu_pct"):
        if column in table and table[column].notna().any():
            return {column: UTILISATION_COLUMNS[column]}
    return {}


def memory_frame(split: pd.DataFrame, run: str = "") -> pd.DataFrame:
    """The memory split (x, part, bytes) in GiB with readable part names, in stacking order."""
    frame = split.dropna(subset=["bytes"])
    parts = frame["part"].astype(str)
    frame = pd.DataFrame({"x": frame["x"], "series": parts.map(MEMORY_PARTS).fillna(parts),
                          "value": frame["bytes"] / GiB, "order": parts.map({p: i for i, p in enumerate(MEMORY_PARTS)}).fillna(len(MEMORY_PARTS))})
    return _finish([frame], run)


def memory_total_frame(table: pd.DataFrame, split: pd.DataFrame, run: str = "") -> pd.DataFrame:
    """One line per run for overlays: the sum of the memory split at each x, in GiB."""
    totals = split.dropna(subset=["bytes"]).groupby("x", as_index=False)["bytes"].sum()
    frame = pd.DataFrame({"x": totals["x"], "series": "memory used",
                          "value": totals["bytes"] / GiB})
    return _finish([frame], run)


def capacity_frame(table: pd.DataFrame, run: str = "") -> pd.DataFrame:
    """The device capacity (GiB) recorded with the run, one row, or empty when unknown."""
    if "mem_capacity" not in table or table["mem_capacity"].dropna().empty:
        return pd.DataFrame(columns=["run", "value", "label"])
    capacity = float(table["mem_capacity"].dropna().max()) / GiB
    label = f"capacity {capacity:,.1f} GiB" + (f" ({run})" if run else "")
    return pd.DataFrame({"run": [run], "value": [capacity], "label": [label]})


def marker_frame(analysis: Any, table: pd.DataFrame, run: str = "",
                 kinds: tuple[str, ...] = ("plateau", "kneedle", "SLO limit", "working point", "OOM")
                 ) -> pd.DataFrame:
    """Vertical rules: the knee markers and working point of an analysis, and every OOM point.

    Markers at the same x share one rule whose label names them all, so labels never overprint.
    """
    rows = []
    for attribute, kind in MARKER_ATTRIBUTES:
        marker = getattr(analysis, attribute, None) if analysis is not None else None
        if marker is not None and kind in kinds:
            rows.append({"x": float(marker.x), "kind": kind, "label": marker.label or kind})
    if "OOM" in kinds and "status" in table:
        for x in sweep_x(table)[table["status"] == "oom"]:
            rows.append({"x": float(x), "kind": "OOM", "label": "OOM"})
    if not rows:
        return pd.DataFrame(columns=["run", "x", "kind", "label"])
    frame = pd.DataFrame(rows)
    frame = frame.groupby("x", as_index=False, sort=True).agg(
        kind=("kind", "first"), label=("label", lambda labels: " · ".join(dict.fromkeys(labels))))
    frame["label"] = frame["label"] + (f" ({run})" if run else "")
    frame.insert(0, "run", run)
    return frame


def linked_charts(table: pd.DataFrame, analysis: Any, slo: Any = None, percentile: int | None = None,
                  memory_split: pd.DataFrame | None = None) -> alt.VConcatChart:
    """The four linked panels for one run; `table` is the analysed points table (Analysis.table).

    `percentile` defaults to the SLO's percentile (or P95); `memory_split` is analysis.memory_split's
    long frame (x, part, bytes).
    """
    percentile = percentile or (slo.percentile if slo is not None else 95)
    split = memory_split if memory_split is not None else pd.DataFrame(columns=["x", "part", "bytes"])
    frames = {
        "throughput": throughput_frame(table),
        "latency": latency_frame(table, percentile),
        "utilisation": utilisation_frame(table),
        "memory": memory_frame(split),
    }
    markers = marker_frame(analysis, table)
    return _stack(frames, markers, colour_by="series", slo=slo, capacity=capacity_frame(table),
                  stacked_memory=True, ticks=axis_values(table), x_title=axis_title(table))


def overlay_charts(tables_by_run: Mapping[str, pd.DataFrame], analyses_by_run: Mapping[str, Any] | None = None,
                   splits_by_run: Mapping[str, pd.DataFrame] | None = None, slo: Any = None,
                   percentile: int | None = None, latency_metric: str | None = None) -> alt.VConcatChart:
    """The same four panels with several runs overlaid: one colour per run, clickable legend.

    To stay readable with ten runs, each panel keeps one series per run: throughput (with band),
    one latency metric (the SLO's, else ITL), the primary utilisation, and total memory used; only
    each run's working point and OOM points are drawn as rules.
    """
    percentile = percentile or (slo.percentile if slo is not None else 95)
    metric = latency_metric or (slo.metric if slo is not None else "itl")
    parts: dict[str, list[pd.DataFrame]] = {"throughput": [], "latency": [], "utilisation": [], "memory": []}
    markers, capacities = [], []
    for run, table in tables_by_run.items():
        split = (splits_by_run or {}).get(run, pd.DataFrame(columns=["x", "part", "bytes"]))
        measured = throughput_frame(table, run)
        parts["throughput"].append(measured[measured["series"] == "measured"])
        parts["latency"].append(latency_frame(table, percentile, run, metrics=(metric,)).query(
            "series != 'roofline decode step'"))
        parts["utilisation"].append(utilisation_frame(table, run, primary_utilisation(table)))
        parts["memory"].append(memory_total_frame(table, split, run))
        markers.append(marker_frame((analyses_by_run or {}).get(run), table, run,
                                    kinds=("working point", "OOM")))
        capacities.append(capacity_frame(table, run))
    frames = {name: _concat(found, _EMPTY_LONG) for name, found in parts.items()}
    capacity = _concat(capacities, ["run", "value", "label"]).drop_duplicates(subset=["value"])
    return _stack(frames, _concat(markers, ["run", "x", "kind", "label"]), colour_by="run",
                  slo=slo, capacity=capacity, stacked_memory=False,
                  ticks=axis_values(*tables_by_run.values()),
                  x_title=axis_title(*tables_by_run.values()))


def memory_split_by_run(splits_by_run: Mapping[str, pd.DataFrame]) -> alt.FacetChart:
    """The stacked memory split of each run side by side, one small panel per run on shared scales,
    so a smaller weights band (a quantised model) or a taller KV band reads at a glance."""
    frames = [memory_frame(split[split["status"] == "ok"] if "status" in split else split, run)
              for run, split in splits_by_run.items()]
    frame = _concat(frames, _EMPTY_LONG + ["order"])
    ticks = sorted(set(frame["x"].astype(float))) if not frame.empty else []
    whole = all(float(t).is_integer() for t in ticks)
    x = alt.X("x:Q", title=None, scale=alt.Scale(type="log", base=2, domain=_domain(ticks)),
              axis=alt.Axis(values=ticks or [1], format="d" if whole else "~g", labelOverlap="greedy"))
    colour = alt.Color("series:N", title="memory", scale=alt.Scale(domain=list(MEMORY_PARTS.values()),
                                                                   scheme="tableau10"))
    area = alt.Chart(frame).mark_area(opacity=0.85, line=True).encode(
        x=x, y=alt.Y("value:Q", stack="zero", title="memory (GiB)"), color=colour, order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("run:N"), alt.Tooltip("series:N", title="part"), alt.Tooltip("x:Q"),
                 alt.Tooltip("value:Q", title="GiB", format=",.2f")])
    width = max(160, PANEL_WIDTH // max(1, len(splits_by_run)) - 20)
    return area.properties(width=width, height=PANEL_HEIGHT).facet(
        column=alt.Column("run:N", title=None, sort=list(splits_by_run), header=alt.Header(labelLimit=width)),
    ).configure_legend(orient="bottom", columns=3)


_EMPTY_LONG = ["run", "x", "series", "value"]
_TITLES = {"throughput": "output tokens/s", "latency": "latency (ms, log)",
           "utilisation": "utilisation (%)", "memory": "memory (GiB)"}


def _ok_points(table: pd.DataFrame) -> pd.DataFrame:
    ok = table[table["status"] == "ok"] if "status" in table else table
    return ok.assign(x=sweep_x(ok)).sort_values("x")


def _finish(rows: list[pd.DataFrame], run: str) -> pd.DataFrame:
    frame = _concat(rows, _EMPTY_LONG[1:])
    frame = frame.dropna(subset=["value"])
    frame.insert(0, "run", run)
    frame["x"] = frame["x"].astype(float)
    frame["value"] = frame["value"].astype(float)
    return frame.reset_index(drop=True)


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    found = [f for f in frames if not f.empty]
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=columns)


def axis_title(*tables: pd.DataFrame) -> str:
    """What the x axis holds: batch size for static points, the swept setting of a continuous run
    (max_num_seqs, concurrency, arrival rate), each named when runs of several kinds are overlaid."""
    found = [axis for table in tables for axis in axes_of(table)]
    titles = [axis.title for key, axis in AXES.items() if axis in found] or [AXES["batch_size"].title]
    if len(titles) == 1:
        return titles[0]
    return " · ".join(t.removesuffix(" (log2)") for t in titles) + " (log2)"


def _stack(frames: dict[str, pd.DataFrame], markers: pd.DataFrame, colour_by: str, slo: Any,
           capacity: pd.DataFrame, stacked_memory: bool, ticks: list[float],
           x_title: str = "batch size (log2)") -> alt.VConcatChart:
    hover = hover_selection()
    whole = all(float(t).is_integer() for t in ticks)
    x = alt.X("x:Q", title=x_title,
              scale=alt.Scale(type="log", base=2, domain=_domain(ticks)),
              axis=alt.Axis(values=ticks or [1], format="d" if whole else "~g", labelOverlap="greedy"))
    legend = alt.selection_point(name="legend", fields=["run"], bind="legend") if colour_by == "run" else None
    panels = []
    for name, frame in frames.items():
        data_layers = _panel_layers(name, frame, x, hover, legend, colour_by,
                                    stacked=stacked_memory and name == "memory")
        layers = [alt.layer(*data_layers), *_marker_layers(markers, x), _hover_rule(frame, x, hover)]
        if name == "latency" and slo is not None:
            layers += _slo_layers(slo)
        far = _capacity_off_scale(frame, capacity, stacked_memory)
        if name == "memory" and not capacity.empty and not far:
            layers += _capacity_layers(capacity)
        title = _TITLES[name] if not frame.empty else f"{_TITLES[name]}: no data recorded"
        if name == "memory" and far:
            title += f" — capacity {far} is off the scale, far above what this run used"
        panels.append(alt.layer(*layers).resolve_scale(color="independent").properties(
            title=title, width=PANEL_WIDTH, height=PANEL_HEIGHT))
    chart = alt.vconcat(*panels, spacing=14)
    # Declared once at the top, naming the views that listen: the hover in all four panels, the legend
    # click in the throughput panel (whose legend then filters all four). Altair suffixes layer names
    # when it nests them, so the names are read back from the compiled spec.
    names = re.findall(r'"name": "((?:hover|lines)_[a-z]+(?:_\d+)?)"', json.dumps(chart.to_dict()))
    chart.params = [alt.TopLevelSelectionParameter(
        name=hover.name, select=hover.param.select, views=[n for n in names if n.startswith("hover_")])]
    if legend is not None:
        chart.params.append(alt.TopLevelSelectionParameter(
            name=legend.name, select=legend.param.select, bind="legend",
            views=[n for n in names if n.startswith("lines_throughput")]))
    return chart.resolve_scale(x="shared", color="independent").configure_legend(
        orient="right", labelLimit=220, symbolLimit=40, symbolOpacity=1).configure_title(anchor="start", fontSize=13)


CAPACITY_SCALE_LIMIT = 10.0


def _capacity_off_scale(frame: pd.DataFrame, capacity: pd.DataFrame, stacked: bool) -> str | None:
    """The capacity in words when drawing it would flatten the data (a CPU run's RAM vs a tiny model)."""
    if capacity.empty or frame.empty:
        return None
    used = frame.groupby(["run", "x"])["value"].sum().max() if stacked else frame["value"].max()
    top = float(capacity["value"].max())
    return f"{top:,.1f} GiB" if used > 0 and top > CAPACITY_SCALE_LIMIT * used else None


def _domain(ticks: list[float]) -> list[float]:
    if not ticks:
        return [1, 2]
    lo, hi = min(ticks), max(ticks)
    return [lo / 1.25, hi * 1.25]


def _panel_layers(name: str, frame: pd.DataFrame, x: alt.X, hover: alt.Parameter,
                  legend: alt.Parameter | None, colour_by: str, stacked: bool) -> list[alt.Chart]:
    """Lines (or a stack) for one panel, a transparent nearest-point layer that owns the hover."""
    base = alt.Chart(frame if not frame.empty else pd.DataFrame(columns=_EMPTY_LONG))
    x_name = _x_name(x)
    y_scale = alt.Scale(type="log") if name == "latency" else alt.Scale(zero=True)
    colour = alt.Color(f"{colour_by}:N", title="run" if colour_by == "run" else name,
                       scale=alt.Scale(scheme="tableau10"), legend=alt.Legend(orient="right"))
    tooltip = ([alt.Tooltip("run:N")] if colour_by == "run" else []) + [
        alt.Tooltip("series:N"), alt.Tooltip("x:Q", title=x_name), alt.Tooltip("value:Q", format=",.3~f")]
    opacity = alt.condition(legend, alt.value(1.0), alt.value(0.12)) if legend is not None else alt.value(1.0)
    layers: list[alt.Chart] = []
    if name == "throughput" and "lo" in frame:
        band = base.transform_filter(alt.datum.series == "measured").mark_area(opacity=0.18).encode(
            x=x, y=alt.Y("lo:Q"), y2="hi:Q", color=colour, detail="run:N")
        if legend is not None:
            band = band.encode(opacity=alt.condition(legend, alt.value(0.18), alt.value(0.03)))
        layers.append(band)
    if stacked:
        layers.append(base.mark_area(opacity=0.85, line=True).encode(
            x=x, y=alt.Y("value:Q", stack="zero", title=_TITLES[name]), color=colour,
            order=alt.Order("order:Q"), tooltip=tooltip))
    else:
        # One run: predictions dashed. Overlay: one series per run and panel, so colour alone says which run.
        dash = (alt.condition("indexof(datum.series, 'roofline') >= 0", alt.value([5, 4]), alt.value([1, 0]))
                if colour_by == "series" else alt.value([1, 0]))
        y = alt.Y("value:Q", title=_TITLES[name], scale=y_scale)
        line = base.mark_line(strokeWidth=2).encode(x=x, y=y, color=colour, strokeDash=dash, detail="run:N",
                                                   opacity=opacity)
        layers.append(line.properties(name=f"lines_{name}"))
        layers.append(base.mark_point(size=30, filled=True).encode(x=x, y=y, color=colour, opacity=opacity,
                                                                   tooltip=tooltip))
    layers.append(base.mark_point(size=160, filled=True).encode(
        x=x, y=alt.Y("value:Q", stack="zero" if stacked else None, scale=y_scale), color=colour,
        opacity=alt.condition(hover, alt.value(1.0), alt.value(0.0)), tooltip=tooltip))
    layers.append(base.mark_point(opacity=0).encode(x=x).properties(name=f"hover_{name}"))
    return layers


def _x_name(x: alt.X) -> str:
    """The axis name for tooltips: "batch size", "arrival rate"."""
    return str(x.to_dict().get("title", "x")).split(" (")[0]


def _hover_rule(frame: pd.DataFrame, x: alt.X, hover: alt.Parameter) -> alt.Chart:
    data = frame if not frame.empty else pd.DataFrame(columns=_EMPTY_LONG)
    return alt.Chart(data).mark_rule(color="#555", strokeWidth=1).encode(x=x).transform_filter(hover)


def _marker_layers(markers: pd.DataFrame, x: alt.X) -> list[alt.Chart]:
    """Labelled dashed vertical rules, coloured by marker kind."""
    if markers.empty:
        return []
    colour = alt.Color("kind:N", title="marker",
                       scale=alt.Scale(domain=list(MARKER_COLOURS), range=list(MARKER_COLOURS.values())),
                       legend=None)
    base = alt.Chart(markers)
    x_name = _x_name(x)
    rule = base.mark_rule(strokeDash=[6, 3], strokeWidth=1.6).encode(
        x=x, color=colour, tooltip=[alt.Tooltip("label:N"), alt.Tooltip("x:Q", title=x_name)])
    text = base.mark_text(align="left", baseline="top", dx=3, fontSize=10).encode(
        x=x, y=alt.value(3), text="label:N", color=colour)
    return [rule, text]


def _slo_layers(slo: Any) -> list[alt.Chart]:
    label = f"SLO: {LATENCY_METRICS.get(slo.metric, slo.metric)} P{slo.percentile} ≤ {slo.ms:g} ms"
    data = pd.DataFrame({"value": [float(slo.ms)], "label": [label]})
    base = alt.Chart(data)
    return [base.mark_rule(color="#d95f02", strokeDash=[2, 2], strokeWidth=1.5).encode(y="value:Q"),
            base.mark_text(align="left", baseline="bottom", color="#d95f02", fontSize=10, dy=-2).encode(
                y="value:Q", x=alt.value(4), text="label:N")]


def _capacity_layers(capacity: pd.DataFrame) -> list[alt.Chart]:
    base = alt.Chart(capacity)
    return [base.mark_rule(color="black", strokeWidth=1.5).encode(y="value:Q"),
            base.mark_text(align="right", baseline="bottom", fontSize=10, dy=-2).encode(
                y="value:Q", x=alt.value(PANEL_WIDTH - 4), text="label:N")]


def length_histogram(lengths: list[int], title: str) -> alt.Chart:
    """The New sweep preview: how the sampled prompt or output lengths are spread."""
    frame = pd.DataFrame({"tokens": lengths})
    return alt.Chart(frame).mark_bar(color="#4c78a8").encode(
        x=alt.X("tokens:Q", bin=alt.Bin(maxbins=40), title=f"{title} (tokens)"),
        y=alt.Y("count():Q", title="requests"),
        tooltip=[alt.Tooltip("count():Q", title="requests")],
    ).properties(height=140)
