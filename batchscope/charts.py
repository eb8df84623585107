"""Altair specs for one run's linked charts, or several runs overlaid: throughput, latency, utilisation
and memory against the sweep axis in a 2 × 2 grid, and below them throughput against each user's speed.

Every panel shares one hover selection, so pointing at a batch in any panel highlights it in all of
them; the pointer's nearest point also opens a tooltip naming its run, series, batch and value with
its unit. x is the run's sweep axis (`analysis.axis.sweep_x`): the batch size of a static sweep, or a
continuous sweep's max_num_seqs, concurrency or arrival rate, on a log2 scale. Knee markers and the
working point are vertical rules in every panel, labelled once, above the throughput panel, in rows
that never overprint. The frames are built in pandas first (testable without a browser); Altair only
draws them. No streamlit import here: pages decide where a chart goes.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import altair as alt
import pandas as pd

from batchscope.analysis.axis import AXES, axes_of, sweep_x
from batchscope.analysis.marker import num
from batchscope.analysis.verdicts import THROUGHPUT

PANEL_WIDTH = 540  # two panels side by side fill a 1440 px window (wide layout, top navigation)
PANEL_HEIGHT = 200
GiB = 1024**3
PERCENTILES = (50, 95, 99)
LATENCY_METRICS = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E"}
QUEUE_SERIES = "queue wait (in TTFT)"
CPU_SERIES = "process CPU % (100 = one core)"
UTILISATION_COLUMNS = {
    "gpu_util_pct": "GPU util (NVML)",
    "mem_ctrl_util_pct": "memory-controller util (NVML)",
    "sm_util_pct": "SM util (GPM)",
    "tensor_active_pct": "tensor active (GPM)",
    "dram_bw_util_pct": "DRAM bandwidth util (GPM)",
    "cpu_pct": CPU_SERIES,
}
COMM_SERIES = "all-reduce share of decode step (tensor parallel)"
MEMORY_PARTS = {"weights": "weights", "kv_used": "KV cache (used)", "kv_unused": "KV cache (allocated, unused)",
                "activations": "activations + workspace", "allocator_reserve": "allocator reserve",
                "other": "CUDA context + other"}
# One colour per memory part on every page (Run, History, Explain), listed in stacking order, bottom up.
MEMORY_COLOURS = {"weights": "#4c78a8", "KV cache (used)": "#f58518", "KV cache (allocated, unused)": "#ffbf79",
                  "activations + workspace": "#54a24b", "allocator reserve": "#b279a2",
                  "CUDA context + other": "#9d755d"}
MARKER_COLOURS = {"plateau": "#1b9e77", "kneedle": "#7570b3", "SLO limit": "#d95f02",
                  "working point": "#e7298a", "OOM": "#d62728"}
MARKER_ATTRIBUTES = (("plateau", "plateau"), ("kneedle", "kneedle"), ("slo_limit", "SLO limit"),
                     ("working_point", "working point"))
UNITS = {"throughput": "tok/s", "latency": "ms", "utilisation": "%", "memory": "GiB"}
TITLES = {"throughput": "output tokens/s", "latency": "latency (ms, log)", "utilisation": "utilisation (%)",
          "memory": "memory (GiB)", "tradeoff": "throughput vs each user's speed"}
LABEL_FONT = 10
LABEL_CHAR_PX = 5.6  # the mean width of a marker label's character at LABEL_FONT
LABEL_ROW_PX = 13
ROOFLINE_ROOM = 2.0  # a roofline more than this many times the measured best would flatten the curve
OFF_SCALE = 1.15  # then the axis keeps this head room over the measured curve and the roofline is clipped


def axis_values(*tables: pd.DataFrame) -> list[float]:
    """Every x any points table holds: the tick values of the shared axis."""
    values: set[float] = set()
    for table in tables:
        if "batch_size" in table:
            values.update(float(x) for x in sweep_x(table).dropna())
    return sorted(values)


def value_text(value: float, unit: str) -> str:
    """A value with its unit as a tooltip shows it: "3 582 tok/s", "1.87 ms", "97.5 %", "12.30 GiB", "96 MiB"."""
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "GiB" and value < 1:
        return f"{value * 1024:,.0f} MiB" if value * 1024 >= 1 else f"{value * 1024 * 1024:,.0f} KiB"
    if unit == "GiB":
        return f"{value:,.2f} GiB"
    return f"{num(value)} {unit}"


def throughput_frame(table: pd.DataFrame, run: str = "") -> pd.DataFrame:
    """Long frame: measured output tokens/s with its min–max repeat band, and the roofline prediction."""
    rows = []
    ok = _ok_points(table)
    if "output_tokens_per_s" in ok:
        lo = ok.get("output_tokens_per_s_min", ok["output_tokens_per_s"]).fillna(ok["output_tokens_per_s"])
        hi = ok.get("output_tokens_per_s_max", ok["output_tokens_per_s"]).fillna(ok["output_tokens_per_s"])
        rows.append(pd.DataFrame({
            "x": ok["x"], "series": "measured", "value": ok["output_tokens_per_s"], "lo": lo, "hi": hi,
            "note": [f"{_band(point)} {num(a)}–{num(b)} tok/s{_trust_note(point, THROUGHPUT)}"
                     for a, b, (_, point) in zip(lo, hi, ok.iterrows())],
            **_point_kind(ok, THROUGHPUT)}))
    if "predicted_tokens_per_s" in ok:
        reached = ok.get("roofline_pct", pd.Series(float("nan"), index=ok.index))
        rows.append(pd.DataFrame({"x": ok["x"], "series": "roofline prediction",
                                  "value": ok["predicted_tokens_per_s"],
                                  "note": [f"an ideal engine; the measured step reaches {num(p)} % of it" if pd.notna(p)
                                           else "an ideal engine" for p in reached]}))
    return _finish(rows, run, UNITS["throughput"])


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
                                      "value": ok[column], **_point_kind(ok, f"{metric}_p{percentile}"),
                                      "note": [_trust_note(point, f"{metric}_p{percentile}").removeprefix("; ")
                                               for _, point in ok.iterrows()]}))
    queue = f"queue_ms_p{percentile}"
    if "ttft" in metrics and queue in ok and ok[queue].notna().any():
        rows.append(pd.DataFrame({"x": ok["x"], "series": f"{QUEUE_SERIES} P{percentile}", "value": ok[queue],
                                  "note": [_trust_note(point, f"queue_p{percentile}").removeprefix("; ")
                                           for _, point in ok.iterrows()]}))
    if "itl" in metrics and "predicted_step_ms" in ok:
        rows.append(pd.DataFrame({"x": ok["x"], "series": "roofline decode step",
                                  "value": ok["predicted_step_ms"], "note": "a decode step at the roofline"}))
    frame = _finish(rows, run, UNITS["latency"])
    return frame[frame["value"] > 0]


def _point_kind(ok: pd.DataFrame, metric: str) -> dict[str, pd.Series]:
    """How a measured point is drawn: hollow when the verdict on this metric (analysis.verdicts) is
    untrusted, a diamond when refinement added it; empty for tables without those columns."""
    kind = {}
    if f"trust_{metric}" in ok:
        kind["trust"] = ok[f"trust_{metric}"]
    if "added_for" in ok:
        kind["added"] = ok["added_for"].notna()
    return kind


def _band(point: pd.Series) -> str:
    """What the shaded band is: the 95 % interval of a point measured until known, else its repeats' range."""
    return "95 % interval" if pd.notna(point.get("tokens_per_s_interval", float("nan"))) else "repeats"


def _trust_note(point: pd.Series, metric: str) -> str:
    """The tooltip's word on this metric's verdict and on refinement: "; caution: Throughput 512 tok/s ± 7 % …"."""
    added = point.get("added_for")
    text = f"; added by refinement ({added} bracket)" if isinstance(added, str) else ""
    verdicts = point.get("trust_metrics")
    verdict = verdicts.get(metric) if isinstance(verdicts, dict) else None
    if verdict is not None:
        text += f"; {verdict['level']}: {' '.join(verdict['reasons'])}"
    return text


def utilisation_frame(table: pd.DataFrame, run: str = "", columns: Mapping[str, str] | None = None,
                      per_gpu: pd.DataFrame | None = None) -> pd.DataFrame:
    """Long frame of every utilisation metric the run recorded (absent sources are left out), and with
    tensor parallelism the all-reduce's share of the decode step in %, the time no GPU computes.
    Process CPU % counts 100 per busy core, so it passes 100 on a machine with several.

    `per_gpu` (Store.gpu_utilisation) holding two or more GPUs replaces the GPU util averaged over
    them with one line per GPU: a replica that finishes its share early shows as its GPU idling."""
    ok = _ok_points(table)
    gpus = _per_gpu_rows(ok, per_gpu)
    rows = [pd.DataFrame({"x": ok["x"], "series": label, "value": ok[column]})
            for column, label in (columns or UTILISATION_COLUMNS).items()
            if column in ok and ok[column].notna().any() and not (column == "gpu_util_pct" and gpus)] + gpus
    if columns is None and "comm_share" in ok and ok["comm_share"].notna().any():
        rows.append(pd.DataFrame({"x": ok["x"], "series": COMM_SERIES, "value": 100.0 * ok["comm_share"]}))
    return _finish(rows, run, UNITS["utilisation"])


def _per_gpu_rows(ok: pd.DataFrame, per_gpu: pd.DataFrame | None) -> list[pd.DataFrame]:
    """One (x, series, value) frame per GPU when the run sampled more than one; [] otherwise."""
    if per_gpu is None or per_gpu["gpu_index"].nunique() < 2 or "point_index" not in ok:
        return []
    found = per_gpu.merge(ok[["point_index", "x"]], on="point_index")
    return [pd.DataFrame({"x": rows["x"], "series": f"{UTILISATION_COLUMNS['gpu_util_pct']}, GPU {gpu}",
                          "value": rows["gpu_util_pct"]}) for gpu, rows in found.groupby("gpu_index")]


def primary_utilisation(table: pd.DataFrame) -> dict[str, str]:
    """The one utilisation metric an overlay shows per run: GPU util when recorded, else process CPU %."""
    for column in ("gpu_util_pct", "cpu_pct"):
        if column in table and table[column].notna().any():
            return {column: UTILISATION_COLUMNS[column]}
    return {}


def memory_frame(split: pd.DataFrame, run: str = "") -> pd.DataFrame:
    """The memory split (x, part, bytes) in GiB with readable part names, in stacking order; each row's
    note is the stack's total at its x."""
    frame = split.dropna(subset=["bytes"])
    parts = frame["part"].astype(str)
    frame = pd.DataFrame({"x": frame["x"], "series": parts.map(MEMORY_PARTS).fillna(parts),
                          "value": frame["bytes"] / GiB,
                          "order": parts.map({p: i for i, p in enumerate(MEMORY_PARTS)}).fillna(len(MEMORY_PARTS))})
    totals = frame.groupby("x")["value"].transform("sum")
    frame["note"] = [f"{value_text(t, 'GiB')} in all at this point" for t in totals]
    return _finish([frame], run, UNITS["memory"])


def memory_total_frame(table: pd.DataFrame, split: pd.DataFrame, run: str = "") -> pd.DataFrame:
    """One line per run for overlays: the sum of the memory split at each x, in GiB."""
    totals = split.dropna(subset=["bytes"]).groupby("x", as_index=False)["bytes"].sum()
    frame = pd.DataFrame({"x": totals["x"], "series": "memory used",
                          "value": totals["bytes"] / GiB})
    return _finish([frame], run, UNITS["memory"])


def tradeoff_frame(table: pd.DataFrame, run: str = "") -> pd.DataFrame:
    """Throughput against the output speed one user sees (1000 / median ITL, tokens/s per user), one
    row per ok point: the trade-off serving benchmarks report. `x` stays the sweep value, so the shared
    hover still selects by batch."""
    ok = _ok_points(table)
    if not {"output_tokens_per_s", "itl_ms_p50"} <= set(ok.columns):
        return pd.DataFrame(columns=["run", "x", "speed", "value", "shown", "speed_shown"])
    ok = ok[(ok["itl_ms_p50"] > 0) & ok["output_tokens_per_s"].notna()]
    speed = 1000.0 / ok["itl_ms_p50"].astype(float)
    frame = pd.DataFrame({"run": run, "x": ok["x"].astype(float), "speed": speed,
                          "value": ok["output_tokens_per_s"].astype(float)})
    frame["shown"] = [value_text(v, "tok/s") for v in frame["value"]]
    frame["speed_shown"] = [f"{num(v)} tok/s per user" for v in frame["speed"]]
    return frame.reset_index(drop=True)


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

    Markers at the same x share one rule whose label names them all, so labels never overprint; the
    run is a column, not part of the label (an overlay's labels stay short, its tooltips name the run).
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
    frame.insert(0, "run", run)
    return frame


def label_rows(markers: pd.DataFrame, domain: list[float], width: int = PANEL_WIDTH) -> pd.DataFrame:
    """Where each marker's label goes above the panel: a row (0 nearest the plot) and a side, so that no
    two labels overlap. A label sits right of its rule, or left of it where it would leave the panel;
    consecutive OOM rules share the first one's label."""
    if markers.empty:
        return markers.assign(row=pd.Series(dtype=int), align=pd.Series(dtype=str))
    frame = markers.drop_duplicates(subset=["x", "label"]).sort_values("x").reset_index(drop=True)  # runs alike
    oom = frame["kind"] == "OOM"
    frame = frame[~(oom & oom.shift(fill_value=False))].reset_index(drop=True)  # label a run of OOMs once
    lo, hi = (math.log2(v) for v in domain)
    ends: list[float] = []  # per row, the right edge of its last label
    rows, aligns = [], []
    for x, label in zip(frame["x"], frame["label"]):
        at = width * (math.log2(x) - lo) / (hi - lo)
        size = LABEL_CHAR_PX * len(label) + 6
        left = at + size > width
        start, end = (at - size, at) if left else (at, at + size)
        row = next((i for i, edge in enumerate(ends) if start > edge), len(ends))
        ends[row:row + 1] = [end]
        rows.append(row)
        aligns.append("right" if left else "left")
    return frame.assign(row=rows, align=aligns)


def linked_charts(table: pd.DataFrame, analysis: Any, slo: Any = None, percentile: int | None = None,
                  memory_split: pd.DataFrame | None = None, run: str = "", per_gpu: pd.DataFrame | None = None
                  ) -> dict:
    """The Vega-Lite spec of the linked panels for one run; `table` is the analysed points table.

    `percentile` defaults to the SLO's percentile (or P95); `memory_split` is analysis.memory_split's
    long frame (x, part, bytes); `run` names the run in every tooltip; `per_gpu` is each GPU's
    utilisation per point (utilisation_frame).
    """
    percentile = percentile or (slo.percentile if slo is not None else 95)
    split = memory_split if memory_split is not None else pd.DataFrame(columns=["x", "part", "bytes"])
    frames = {
        "throughput": throughput_frame(table, run),
        "latency": latency_frame(table, percentile, run),
        "utilisation": utilisation_frame(table, run, per_gpu=per_gpu),
        "memory": memory_frame(split, run),
    }
    markers = marker_frame(analysis, table).assign(run=run)  # the run in every row, not in every label
    return _grid(frames, markers, tradeoff_frame(table, run), colour_by="series", slo=slo,
                 capacity=capacity_frame(table), stacked_memory=True, ticks=axis_values(table),
                 x_title=axis_title(table))


def overlay_charts(tables_by_run: Mapping[str, pd.DataFrame], analyses_by_run: Mapping[str, Any] | None = None,
                   splits_by_run: Mapping[str, pd.DataFrame] | None = None, slo: Any = None,
                   percentile: int | None = None, latency_metric: str | None = None) -> dict:
    """The same panels with several runs overlaid: one colour per run, clickable legend.

    To stay readable with ten runs, each panel keeps one series per run: throughput (with band),
    one latency metric (the SLO's, else ITL), the primary utilisation, and total memory used; only
    each run's working point and OOM points are drawn as rules.
    """
    percentile = percentile or (slo.percentile if slo is not None else 95)
    metric = latency_metric or (slo.metric if slo is not None else "itl")
    parts: dict[str, list[pd.DataFrame]] = {"throughput": [], "latency": [], "utilisation": [], "memory": []}
    markers, capacities, tradeoffs = [], [], []
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
        tradeoffs.append(tradeoff_frame(table, run))
    frames = {name: _concat(found, _EMPTY_LONG) for name, found in parts.items()}
    capacity = _concat(capacities, ["run", "value", "label"]).drop_duplicates(subset=["value"])
    return _grid(frames, _concat(markers, ["run", "x", "kind", "label"]), _concat(tradeoffs, _TRADEOFF),
                 colour_by="run", slo=slo, runs=list(tables_by_run), capacity=capacity, stacked_memory=False,
                 ticks=axis_values(*tables_by_run.values()), x_title=axis_title(*tables_by_run.values()))


def memory_colour(title: str | None = "memory", legend: dict | None = None) -> dict:
    """The memory parts' colour encoding every page uses: fixed colours, legend in stacking order."""
    return {"field": "series", "type": "nominal", "title": title,
            "scale": {"domain": list(MEMORY_COLOURS), "range": list(MEMORY_COLOURS.values())},
            "sort": list(MEMORY_COLOURS), "legend": legend or {"orient": "bottom", "columns": 3}}


def memory_split_by_run(splits_by_run: Mapping[str, pd.DataFrame]) -> alt.FacetChart:
    """The stacked memory split of each run side by side, one small panel per run on shared scales,
    so a smaller weights band (a quantised model) or a taller KV band reads at a glance."""
    frames = [memory_frame(split[split["status"] == "ok"] if "status" in split else split, run)
              for run, split in splits_by_run.items()]
    frame = _concat(frames, _EMPTY_LONG + ["order", "note"])
    ticks = sorted(set(frame["x"].astype(float))) if not frame.empty else []
    whole = all(float(t).is_integer() for t in ticks)
    x = alt.X("x:Q", title=None, scale=alt.Scale(type="log", base=2, domain=_domain(ticks)),
              axis=alt.Axis(values=ticks or [1], format="d" if whole else "~g", labelOverlap="greedy"))
    area = alt.Chart(frame).mark_area(opacity=0.85, line=True).encode(
        x=x, y=alt.Y("value:Q", stack="zero", title="memory (GiB)"), color=alt.Color(**memory_colour()),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("run:N"), alt.Tooltip("series:N", title="part"), alt.Tooltip("x:Q"),
                 alt.Tooltip("shown:N", title="size"), alt.Tooltip("note:N", title="total")])
    width = max(160, 2 * PANEL_WIDTH // max(1, len(splits_by_run)) - 20)
    return area.properties(width=width, height=PANEL_HEIGHT).facet(
        column=alt.Column("run:N", title=None, sort=list(splits_by_run), header=alt.Header(labelLimit=width)),
    ).configure_legend(orient="bottom", columns=3)


_EMPTY_LONG = ["run", "x", "series", "value", "shown"]
_TRADEOFF = ["run", "x", "speed", "value", "shown", "speed_shown"]


def _ok_points(table: pd.DataFrame) -> pd.DataFrame:
    ok = table[table["status"] == "ok"] if "status" in table else table
    return ok.assign(x=sweep_x(ok)).sort_values("x")


def _finish(rows: list[pd.DataFrame], run: str, unit: str) -> pd.DataFrame:
    frame = _concat(rows, ["x", "series", "value"])
    frame = frame.dropna(subset=["value"])
    frame.insert(0, "run", run)
    frame["x"] = frame["x"].astype(float)
    frame["value"] = frame["value"].astype(float)
    frame["shown"] = [value_text(v, unit) for v in frame["value"]]
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


# ---- the spec, written as Vega-Lite dicts: Altair's composition deep-copies every nested chart and took
# seconds for these five panels, most of a page's time; plain dicts take milliseconds ----

HOVER = "hover"
LEGEND = "legend"


class _Data:
    """The datasets of one spec: each frame stored once, as JSON records, under a short name."""

    def __init__(self) -> None:
        self.values: dict[str, list[dict]] = {}

    def add(self, frame: pd.DataFrame) -> dict:
        name = f"d{len(self.values)}"
        self.values[name] = json.loads(frame.to_json(orient="records", double_precision=12))
        return {"name": name}


def _q(field: str, **options: Any) -> dict:
    return {"field": field, "type": "quantitative", **options}


def _n(field: str, **options: Any) -> dict:
    return {"field": field, "type": "nominal", **options}


def _when(param: str, then: Any, otherwise: Any) -> dict:
    """A value that follows a selection (the hover, or the legend click); the hover selects nothing when empty."""
    return {"condition": {"param": param, "value": then, **({"empty": False} if param == HOVER else {})},
            "value": otherwise}


def _grid(frames: dict[str, pd.DataFrame], markers: pd.DataFrame, tradeoff: pd.DataFrame, colour_by: str,
          slo: Any, capacity: pd.DataFrame, stacked_memory: bool, ticks: list[float],
          x_title: str = "batch size (log2)", runs: list[str] | None = None) -> dict:
    """Throughput and latency, then utilisation and memory, then the trade-off: one hover across all.
    With `runs` (an overlay) every mark of a run, its markers included, takes that run's one colour."""
    data = _Data()
    domain = _domain(ticks)
    whole = all(float(t).is_integer() for t in ticks)
    x = _q("x", title=x_title, scale={"type": "log", "base": 2, "domain": domain},
           axis={"values": ticks or [1], "format": "d" if whole else "~g", "labelOverlap": "greedy"})
    x_name = x_title.split(" (")[0]
    overlay = colour_by == "run"
    scale = run_scale(runs or [])
    marker_colour = _n("run", scale=scale, legend=None) if overlay else _MARKER_COLOUR
    marker_data = data.add(markers) if not markers.empty else None
    label_space = 0 if markers.empty else (int(label_rows(markers, domain)["row"].max()) + 1) * LABEL_ROW_PX
    panels = {}
    for name, frame in frames.items():
        stacked = stacked_memory and name == "memory"
        y_top = _y_top(name, frame)
        title = _title(name, frame)
        if y_top is not None:
            title += f" — roofline prediction (up to {value_text(frame['value'].max(), 'tok/s')}) off the scale"
        frame_data = data.add(frame if not frame.empty else pd.DataFrame(columns=_EMPTY_LONG))
        layers = [{"layer": _panel_layers(name, frame, frame_data, x, x_name, colour_by, stacked, y_top, scale)}]
        if marker_data is not None:
            layers += _marker_layers(markers, marker_data, x, labelled=name == "throughput", domain=domain, data=data,
                                     colour=marker_colour)
        layers.append({"name": f"pointer_{name}", "data": frame_data, "mark": {"type": "rule", "color": "#555",
                                                                               "strokeWidth": 1},
                       "encoding": {"x": x}, "transform": [{"filter": {"param": HOVER, "empty": False}}]})
        if name == "latency" and slo is not None:
            layers += _level(data, float(slo.ms), _slo_label(slo), "#d95f02", align="left")
        far = _capacity_off_scale(frame, capacity, stacked_memory)
        if name == "memory" and not capacity.empty and not far:
            layers += _level(data, float(capacity["value"].max()), str(capacity["label"].iloc[0]), "black",
                             align="right", dash=None)
        if name == "memory" and far:
            title += f" — capacity {far} is off the scale, far above what this run used"
        # the labels above the throughput panel push its title up; its neighbour's title follows
        panels[name] = {"layer": layers, "resolve": {"scale": {"color": "independent"}},
                        "title": {"text": title, "offset": 6 + (label_space if name == "latency" else 0)},
                        "width": PANEL_WIDTH, "height": PANEL_HEIGHT}
    grid = {"vconcat": [{"hconcat": [panels["throughput"], panels["latency"]], "spacing": 28},
                        {"hconcat": [panels["utilisation"], panels["memory"]], "spacing": 28}],
            "spacing": 18, "resolve": {"scale": {"x": "shared", "color": "independent"}}}
    views = [f"hover_{name}" for name in (*frames, "tradeoff")]
    params = [{"name": HOVER, "views": views, "select": {"type": "point", "fields": ["x"], "on": "pointerover",
                                                         "nearest": True, "clear": "pointerout"}}]
    if overlay:  # the legend of the throughput panel picks runs out in every panel
        params.append({"name": LEGEND, "views": ["lines_throughput"], "bind": "legend",
                       "select": {"type": "point", "fields": ["run"]}})
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        "vconcat": [grid, _tradeoff_panel(tradeoff, markers, data, colour_by, x_name, scale)], "spacing": 18,
        "params": params, "resolve": {"scale": {"x": "independent", "color": "independent"}},
        "datasets": data.values,
        "config": {"legend": {"labelLimit": 260, "symbolLimit": 40, "symbolOpacity": 1, "columnPadding": 14},
                   "title": {"anchor": "start", "fontSize": 13}},
    }


def _title(name: str, frame: pd.DataFrame) -> str:
    return TITLES[name] if not frame.empty else f"{TITLES[name]}: no data recorded"


def _y_top(name: str, frame: pd.DataFrame) -> float | None:
    """The throughput axis's top when the roofline prediction would flatten the measured curve (hf-generate
    reaches 1–4 % of it, a CPU run less), so the curve keeps the panel; None when everything fits."""
    if name != "throughput" or frame.empty:
        return None
    measured = frame[frame["series"] == "measured"]
    if measured.empty:
        return None
    best = float(measured[["value", "hi"]].max().max())
    return best * OFF_SCALE if float(frame["value"].max()) > ROOFLINE_ROOM * best else None


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


def _panel_layers(name: str, frame: pd.DataFrame, data: dict, x: dict, x_name: str, colour_by: str,
                  stacked: bool, y_top: float | None, scale: dict) -> list[dict]:
    """Lines (or a stack) for one panel, the highlight of the hovered x, and last, on top, the invisible
    layer that owns the hover: Vega-Lite's nearest-point cells sit above every mark and take the
    pointer, so the tooltip lives on them, for the point nearest the pointer."""
    overlay = colour_by == "run"
    y_scale = ({"type": "log"} if name == "latency" else
               {"zero": True, "domain": [0, y_top]} if y_top is not None else {"zero": True})
    if stacked:
        colour = memory_colour(None, {"orient": "bottom", "columns": 3})
    else:
        shown = not overlay or name == "throughput"  # an overlay names its runs once
        colour = _n(colour_by, title=None, scale=scale if overlay else {"scheme": "tableau10"},
                    legend={"orient": "bottom", "columns": 2} if shown else None)
    opacity = _when(LEGEND, 1.0, 0.12) if overlay else {"value": 1.0}
    y = _q("value", title=TITLES[name], scale=y_scale, **({"stack": "zero"} if stacked else {}))
    order = {"order": _q("order")} if stacked else {}
    layers: list[dict] = []
    if name == "throughput" and "lo" in frame:
        layers.append({"mark": {"type": "area", "opacity": 0.18, "clip": True},
                       "transform": [{"filter": "datum.series == 'measured'"}],
                       "encoding": {"x": x, "y": _q("lo", scale=y_scale), "y2": {"field": "hi"}, "color": colour,
                                    "detail": _n("run"),
                                    **({"opacity": _when(LEGEND, 0.18, 0.03)} if overlay else {})}})
    if stacked:
        layers.append({"name": f"stack_{name}", "mark": {"type": "area", "opacity": 0.85, "line": True},
                       "encoding": {"x": x, "y": y, "color": colour, **order}})
    else:
        # One run: predictions dashed. Overlay: one series per run and panel, so colour alone says which run.
        dash = ({"condition": {"test": "indexof(datum.series, 'roofline') >= 0", "value": [5, 4]}, "value": [1, 0]}
                if not overlay else {"value": [1, 0]})
        layers.append({"name": f"lines_{name}", "mark": {"type": "line", "strokeWidth": 2, "clip": True},
                       "encoding": {"x": x, "y": y, "color": colour, "strokeDash": dash, "detail": _n("run"),
                                    "opacity": opacity}})
        # a point whose verdict on this panel's metric is untrusted is drawn hollow, an added one a diamond
        shape = {"condition": {"test": "datum.added === true", "value": "diamond"}, "value": "circle"}
        for test, filled in (("datum.trust !== 'untrusted'", True), ("datum.trust === 'untrusted'", False)):
            layers.append({"mark": {"type": "point", "size": 30 if filled else 60, "filled": filled,
                                    "strokeWidth": 1.5, "clip": True}, "transform": [{"filter": test}],
                           "encoding": {"x": x, "y": y, "color": colour, "opacity": opacity, "shape": shape}})
    layers.append({"mark": {"type": "point", "size": 160, "filled": True, "clip": True},
                   "encoding": {"x": x, "y": y, "color": colour, "opacity": _when(HOVER, 1.0, 0.0), **order}})
    tooltip = [_n("run"), _n("series", title="part" if stacked else "series"), _q("x", title=x_name, format="~g"),
               _n("shown", title="value")]
    if "note" in frame and frame["note"].notna().all():
        tooltip.append(_n("note"))
    layers.append({"name": f"hover_{name}", "mark": {"type": "point", "opacity": 0},
                   **({"transform": [{"filter": f"datum.value <= {y_top}"}]} if y_top is not None else {}),
                   "encoding": {"x": x, "y": y, "tooltip": tooltip, **order}})
    return [{"data": data, **layer} for layer in layers]


def _tradeoff_panel(frame: pd.DataFrame, markers: pd.DataFrame, data: _Data, colour_by: str, x_name: str,
                    scale: dict) -> dict:
    """Throughput against tokens/s per user, each point labelled with its sweep value: moving left along
    the curve buys throughput with every user's speed. The knee markers and working point are ringed."""
    empty = frame.empty
    source = data.add(frame if not empty else pd.DataFrame(columns=_TRADEOFF))
    x = _q("speed", title="output tokens/s per user (1000 / ITL P50, log)", scale={"type": "log"})
    y = _q("value", title="output tokens/s", scale={"zero": True})
    overlay = colour_by == "run"
    colour = _n("run", title=None, scale=scale, legend=None) if overlay else {"value": "#4c78a8"}
    opacity = _when(LEGEND, 1.0, 0.12) if overlay else {"value": 1.0}
    layers = [
        {"mark": {"type": "line", "strokeWidth": 2},
         "encoding": {"x": x, "y": y, "color": colour, "detail": _n("run"), "order": _q("x"), "opacity": opacity}},
        {"mark": {"type": "point", "size": 30, "filled": True}, "encoding": {"x": x, "y": y, "color": colour,
                                                                           "opacity": opacity}},
        {"mark": {"type": "text", "dy": -9, "fontSize": LABEL_FONT, "color": "#555"},
         "encoding": {"x": x, "y": y, "text": _q("x", format="~g"), "opacity": opacity}},
        {"mark": {"type": "point", "size": 200, "filled": True},
         "encoding": {"x": x, "y": y, "color": colour, "opacity": _when(HOVER, 1.0, 0.0)}},
    ]
    layers = [{"data": source, **layer} for layer in layers]
    ringed = frame.merge(markers[["run", "x", "kind"]], on=["run", "x"]) if not (empty or markers.empty) else frame
    if not empty and not markers.empty and not ringed.empty:
        layers.append({"data": data.add(ringed), "mark": {"type": "point", "size": 260, "strokeWidth": 2.2,
                                                          "filled": False},
                       "encoding": {"x": x, "y": y, "color": colour if overlay else _MARKER_COLOUR}})
    layers.append({"data": source, "name": "hover_tradeoff", "mark": {"type": "point", "opacity": 0},
                   "encoding": {"x": x, "y": y, "tooltip": [
                       _n("run"), _q("x", title=x_name, format="~g"), _n("shown", title="throughput"),
                       _n("speed_shown", title="per user")]}})
    title = TITLES["tradeoff"] + (": no ITL recorded" if empty else
                                  f" — labels: {x_name}; leftwards, more throughput but slower for each user")
    return {"layer": layers, "resolve": {"scale": {"color": "independent"}}, "title": title,
            "width": PANEL_WIDTH, "height": PANEL_HEIGHT}


TABLEAU10 = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d",
             "#bab0ac")


def run_scale(runs: list[str]) -> dict:
    """One colour per run, in the order the runs were picked, for every layer of every panel: the panels'
    colour scales are independent, so an explicit domain is what keeps a run's colour the same in all."""
    return {"domain": runs, "range": [TABLEAU10[i % len(TABLEAU10)] for i in range(len(runs))]}


_MARKER_COLOUR = _n("kind", scale={"domain": list(MARKER_COLOURS), "range": list(MARKER_COLOURS.values())},
                    legend=None)


def _marker_layers(markers: pd.DataFrame, source: dict, x: dict, labelled: bool, domain: list[float],
                   data: _Data, colour: dict) -> list[dict]:
    """Dashed vertical rules in `colour` (by marker kind, or in an overlay by run); with `labelled`, their
    labels above the panel, one row each where they would overlap (see `label_rows`)."""
    layers = [{"data": source, "mark": {"type": "rule", "strokeDash": [6, 3], "strokeWidth": 1.6},
               "encoding": {"x": x, "color": colour}}]
    if labelled:
        placed = label_rows(markers, domain)
        placed = placed.assign(y=-4 - placed["row"] * LABEL_ROW_PX)
        for align, dx in (("left", 3), ("right", -3)):
            side = placed[placed["align"] == align]
            if not side.empty:
                layers.append({"data": data.add(side), "mark": {
                    "type": "text", "align": align, "baseline": "bottom", "dx": dx, "fontSize": LABEL_FONT,
                    "fontWeight": "bold"}, "encoding": {"x": x, "y": _q("y", scale=None), "text": _n("label"),
                                                        "color": colour}})
    return layers


def _slo_label(slo: Any) -> str:
    return f"SLO: {LATENCY_METRICS.get(slo.metric, slo.metric)} P{slo.percentile} ≤ {slo.ms:g} ms"


def _level(data: _Data, level: float, label: str, colour: str, align: str, dash: list[int] | None = (2, 2)
           ) -> list[dict]:
    """A labelled horizontal line: the SLO (dashed, label at the left) or the capacity (solid, at the right)."""
    source = data.add(pd.DataFrame({"value": [level], "label": [label]}))
    rule = {"type": "rule", "color": colour, "strokeWidth": 1.5, **({"strokeDash": list(dash)} if dash else {})}
    x = {"value": 4} if align == "left" else {"value": PANEL_WIDTH - 4}
    return [{"data": source, "mark": rule, "encoding": {"y": _q("value")}},
            {"data": source, "mark": {"type": "text", "align": align, "baseline": "bottom", "color": colour,
                                      "fontSize": 10, "dy": -2},
             "encoding": {"y": _q("value"), "x": x, "text": _n("label")}}]


def best_throughput_chart(runs: pd.DataFrame) -> dict:
    """Home's glance at the latest runs: each one's best output tokens/s, coloured by how it ended (a
    cancelled one-point run reads as the stub it is)."""
    frame = runs.assign(label=runs["name"].fillna(runs["run_id"]), best=runs["best_output_tokens_per_s"].fillna(0.0),
                        shown=[value_text(v, "tok/s") if pd.notna(v) else "no finished point"
                               for v in runs["best_output_tokens_per_s"]])[
        ["label", "best", "shown", "state", "points_ok"]]
    return {"$schema": "https://vega.github.io/schema/vega-lite/v6.json",
            "data": {"values": json.loads(frame.to_json(orient="records"))}, "height": {"step": 22},
            "mark": {"type": "bar", "cornerRadiusEnd": 3},
            "encoding": {"y": _n("label", title=None, sort=None, axis={"labelLimit": 200}),
                         "x": _q("best", title="best output tokens/s"),
                         "color": _n("state", title=None, legend={"orient": "bottom"}),
                         "tooltip": [_n("label", title="run"), _n("shown", title="best"), _n("state"),
                                     _q("points_ok", title="ok points")]}}


def length_histogram(lengths: list[int], title: str) -> alt.Chart:
    """The New sweep preview: how the sampled prompt or output lengths are spread."""
    frame = pd.DataFrame({"tokens": lengths})
    return alt.Chart(frame).mark_bar(color="#4c78a8").encode(
        x=alt.X("tokens:Q", bin=alt.Bin(maxbins=40), title=f"{title} (tokens)"),
        y=alt.Y("count():Q", title="requests"),
        tooltip=[alt.Tooltip("count():Q", title="requests")],
    ).properties(height=140)
