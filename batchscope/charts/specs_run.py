"""The Vega-Lite spec of one run's linked charts, or several runs overlaid: throughput, latency, utilisation
and memory against the sweep axis in a 2 × 2 grid, and below them throughput against each user's speed.

Every panel shares one hover selection, so pointing at a batch in any panel highlights it in all of
them; the pointer's nearest point also opens a tooltip naming its run, series, batch and value with
its unit. x is the run's sweep axis, on a log2 scale. Knee markers and the working point are vertical
rules in every panel, labelled once, above the throughput panel, in rows that never overprint.
No streamlit import here: pages decide where a chart goes.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from batchscope.charts.frames import (CPU_MEMORY_NOTE, EMPTY_LONG, LATENCY_METRICS, ROOFLINE_STEP_SERIES,
                                      TRADEOFF_COLUMNS, axis_title, axis_values, capacity_frame, concat, latency_frame, marker_frame,
                                      memory_frame, memory_total_frame, primary_utilisation, throughput_frame,
                                      measured_parts, tradeoff_frame, utilisation_frame)
from batchscope.charts.layout import (LABEL_FONT, LABEL_ROW_PX, PANEL_HEIGHT, PANEL_WIDTH, TITLES, capacity_off_scale,
                                      label_rows, log_domain, panel_title, throughput_top, value_domain)
from batchscope.charts.palette import MARKER_COLOURS, dash_test, memory_colour, run_scale, series_scale
from batchscope.charts.vega import HOVER, LEGEND, Datasets, nominal, quantitative, when
from batchscope.units import value_text

def linked_charts(table: pd.DataFrame, analysis: Any, slo: Any = None, percentile: int | None = None,
                  memory_split: pd.DataFrame | None = None, run: str = "", per_gpu: pd.DataFrame | None = None,
                  cpu_cores: int | None = None, on_gpu: bool = True, width: int = PANEL_WIDTH) -> dict:
    """The Vega-Lite spec of the linked panels for one run; `table` is the analysed points table.

    `percentile` defaults to the SLO's percentile (or P95); `memory_split` is analysis.memory_split's
    long frame (x, part, bytes); `run` names the run in every tooltip; `per_gpu` is each GPU's
    utilisation per point and `cpu_cores` the cores the run had (utilisation_frame); a run not `on_gpu`
    draws only the memory parts a CPU measures (frames.measured_parts); `width` is each panel's (see
    `layout.panel_width`: the page's width, two panels a row).
    """
    percentile = percentile or (slo.percentile if slo is not None else 95)
    split = measured_parts(memory_split if memory_split is not None else pd.DataFrame(columns=["x", "part", "bytes"]),
                           on_gpu)
    frames = {
        "throughput": throughput_frame(table, run),
        "latency": latency_frame(table, percentile, run),
        "utilisation": utilisation_frame(table, run, per_gpu=per_gpu, cpu_cores=cpu_cores),
        "memory": memory_frame(split, run),
    }
    markers = marker_frame(analysis, table).assign(run=run)  # the run in every row, not in every label
    return grid(frames, markers, tradeoff_frame(table, run), colour_by="series", slo=slo,
                capacity=capacity_frame(table), stacked_memory=True, ticks=axis_values(table),
                x_title=axis_title(table), memory_note=None if on_gpu else CPU_MEMORY_NOTE, width=width)


def overlay_charts(tables_by_run: Mapping[str, pd.DataFrame], analyses_by_run: Mapping[str, Any] | None = None,
                   splits_by_run: Mapping[str, pd.DataFrame] | None = None, slo: Any = None,
                   percentile: int | None = None, latency_metric: str | None = None, width: int = PANEL_WIDTH) -> dict:
    """The same panels with several runs overlaid: one colour per run, clickable legend; `width` is each
    panel's, as in `linked_charts`.

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
            f"series != '{ROOFLINE_STEP_SERIES}'"))
        parts["utilisation"].append(utilisation_frame(table, run, primary_utilisation(table)))
        parts["memory"].append(memory_total_frame(table, split, run))
        markers.append(marker_frame((analyses_by_run or {}).get(run), table, run,
                                    kinds=("working point", "OOM")))
        capacities.append(capacity_frame(table, run))
        tradeoffs.append(tradeoff_frame(table, run))
    frames = {name: concat(found, EMPTY_LONG) for name, found in parts.items()}
    capacity = concat(capacities, ["run", "value", "label"]).drop_duplicates(subset=["value"])
    return grid(frames, concat(markers, ["run", "x", "kind", "label"]), concat(tradeoffs, TRADEOFF_COLUMNS),
                 colour_by="run", slo=slo, runs=list(tables_by_run), capacity=capacity, stacked_memory=False,
                 ticks=axis_values(*tables_by_run.values()), x_title=axis_title(*tables_by_run.values()), width=width)


def grid(frames: dict[str, pd.DataFrame], markers: pd.DataFrame, tradeoff: pd.DataFrame, colour_by: str,
          slo: Any, capacity: pd.DataFrame, stacked_memory: bool, ticks: list[float],
          x_title: str = "batch size (log2)", runs: list[str] | None = None, memory_note: str | None = None,
          width: int = PANEL_WIDTH) -> dict:
    """Throughput and latency, then utilisation and memory, then the trade-off: one hover across all.
    With `runs` (an overlay) every mark of a run, its markers included, takes that run's one colour."""
    data = Datasets()
    domain = log_domain(ticks)
    whole = all(float(t).is_integer() for t in ticks)
    x = quantitative("x", title=x_title, scale={"type": "log", "base": 2, "domain": domain},
           axis={"values": ticks or [1], "format": "d" if whole else "~g", "labelOverlap": "greedy"})
    x_name = x_title.split(" (")[0]
    overlay = colour_by == "run"
    scale = run_scale(runs or [])
    marker_colour = nominal("run", scale=scale, legend=None) if overlay else MARKER_COLOUR
    marker_data = data.add(markers) if not markers.empty else None
    label_space = 0 if markers.empty else (int(label_rows(markers, domain, width)["row"].max()) + 1) * LABEL_ROW_PX
    panels = {}
    for name, frame in frames.items():
        stacked = stacked_memory and name == "memory"
        y_top = throughput_top(name, frame)
        title = panel_title(name, frame)
        if name == "utilisation" and not frame.empty and frame["series"].str.startswith("process CPU").all():
            title = title.replace("utilisation", "CPU utilisation", 1)  # a CPU run: say so
        if y_top is not None:
            title += f" — roofline prediction (up to {value_text(frame['value'].max(), 'tok/s')}) off the scale"
        far = capacity_off_scale(frame, capacity, stacked_memory)
        slo_line = float(slo.ms) if name == "latency" and slo is not None else None
        capacity_line = float(capacity["value"].max()) if name == "memory" and not capacity.empty and not far else None
        levels = tuple(line for line in (slo_line, capacity_line) if line is not None)
        y_domain = value_domain(frame, ("value", "lo", "hi"), stacked, levels, log=name == "latency")
        frame_data = data.add(frame if not frame.empty else pd.DataFrame(columns=EMPTY_LONG))
        layers = [{"layer": _panel_layers(name, frame, frame_data, x, x_name, colour_by, stacked, y_top, scale,
                                          y_domain, blank=frame.empty and not levels)}]
        if marker_data is not None:
            layers += _marker_layers(markers, marker_data, x, labelled=name == "throughput", domain=domain, data=data,
                                     colour=marker_colour, width=width)
        layers.append({"name": f"pointer_{name}", "data": frame_data, "mark": {"type": "rule", "color": "#555",
                                                                               "strokeWidth": 1},
                       "encoding": {"x": x}, "transform": [{"filter": {"param": HOVER, "empty": False}}]})
        if slo_line is not None:
            layers += _level(data, slo_line, _slo_label(slo), "#d95f02", align="left", width=width)
        if capacity_line is not None:
            layers += _level(data, capacity_line, str(capacity["label"].iloc[0]), "black", align="right", dash=None,
                             width=width)
        if name == "memory" and far:
            title += f" — capacity {far} is off the scale, far above what this run used"
        if name == "memory" and memory_note:
            title += f" ({memory_note})"
        # the labels above the throughput panel push its title up; its neighbour's title follows
        panels[name] = {"layer": layers, "resolve": {"scale": {"color": "independent"}},
                        "title": {"text": title, "offset": 6 + (label_space if name == "latency" else 0)},
                        "width": width, "height": PANEL_HEIGHT}
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
        "vconcat": [grid, _tradeoff_panel(tradeoff, markers, data, colour_by, x_name, scale, width)], "spacing": 18,
        "params": params, "resolve": {"scale": {"x": "independent", "color": "independent"}},
        "datasets": data.values,
        "config": {"legend": {"labelLimit": 260, "symbolLimit": 40, "symbolOpacity": 1, "columnPadding": 14},
                   "title": {"anchor": "start", "fontSize": 13}},
    }


def _panel_layers(name: str, frame: pd.DataFrame, data: dict, x: dict, x_name: str, colour_by: str,
                  stacked: bool, y_top: float | None, scale: dict, y_domain: list[float] | None = None,
                  blank: bool = False) -> list[dict]:
    """Lines (or a stack) for one panel, the highlight of the hovered x, and last, on top, the invisible
    layer that owns the hover: Vega-Lite's nearest-point cells sit above every mark and take the
    pointer, so the tooltip lives on them, for the point nearest the pointer. `y_domain`: the data's
    (layout.value_domain), where no fixed top applies; `blank`: nothing recorded and no level line, so the axis
    has no numbers and no legend names series that are not drawn."""
    overlay = colour_by == "run"
    fitted = {"domain": y_domain, "nice": True} if y_domain is not None else {}
    y_scale = ({"domain": [0, 1]} if blank else
               {"type": "log", **fitted} if name == "latency" else
               {"zero": True, "domain": [0, y_top]} if y_top is not None else
               {"zero": True, "domain": [0, percent_top(frame)]} if name == "utilisation" else
               {"zero": True, **fitted})
    if blank:
        colour = nominal(colour_by, legend=None, **({"scale": scale} if overlay else {}))
    elif stacked:
        colour = memory_colour(frame["series"], None, {"orient": "bottom", "columns": 3})
    else:
        shown = not overlay or name == "throughput"  # an overlay names its runs once
        colour = nominal(colour_by, title=None, scale=scale if overlay else series_scale(frame["series"]),
                         legend={"orient": "bottom", "columns": 2} if shown else None)
    opacity = when(LEGEND, 1.0, 0.12) if overlay else {"value": 1.0}
    y = quantitative("value", title=TITLES[name], scale=y_scale, **({"stack": "zero"} if stacked else {}),
                     **({"axis": {"labels": False, "ticks": False}} if blank else {}))
    order = {"order": quantitative("order")} if stacked else {}
    layers: list[dict] = []
    if name == "throughput" and "lo" in frame:
        layers.append({"mark": {"type": "area", "opacity": 0.18, "clip": True},
                       "transform": [{"filter": "datum.series == 'measured'"}],
                       "encoding": {"x": x, "y": quantitative("lo", scale=y_scale), "y2": {"field": "hi"},
                                    "color": colour,
                                    "detail": nominal("run"),
                                    **({"opacity": when(LEGEND, 0.18, 0.03)} if overlay else {})}})
    if stacked:
        layers.append({"name": f"stack_{name}", "mark": {"type": "area", "opacity": 0.85, "line": True},
                       "encoding": {"x": x, "y": y, "color": colour, **order}})
    else:
        # One run: predictions, and a part over its whole (queue wait in TTFT), dashed. Overlay: one series per
        # run and panel, so colour alone says which run.
        dash = ({"condition": {"test": dash_test(frame["series"]), "value": [5, 4]}, "value": [1, 0]}
                if not overlay else {"value": [1, 0]})
        layers.append({"name": f"lines_{name}", "mark": {"type": "line", "strokeWidth": 2, "clip": True},
                       "encoding": {"x": x, "y": y, "color": colour, "strokeDash": dash, "detail": nominal("run"),
                                    "opacity": opacity}})
        # a point whose verdict on this panel's metric is untrusted is drawn hollow, an added one a diamond
        shape = {"condition": {"test": "datum.added === true", "value": "diamond"}, "value": "circle"}
        for test, filled in (("datum.trust !== 'untrusted'", True), ("datum.trust === 'untrusted'", False)):
            layers.append({"mark": {"type": "point", "size": 30 if filled else 60, "filled": filled,
                                    "strokeWidth": 1.5, "clip": True}, "transform": [{"filter": test}],
                           "encoding": {"x": x, "y": y, "color": colour, "opacity": opacity, "shape": shape}})
    layers.append({"mark": {"type": "point", "size": 160, "filled": True, "clip": True},
                   "encoding": {"x": x, "y": y, "color": colour, "opacity": when(HOVER, 1.0, 0.0), **order}})
    tooltip = [nominal("run"), nominal("series", title="part" if stacked else "series"),
               quantitative("x", title=x_name, format="~g"),
               nominal("shown", title="value")]
    if "note" in frame and frame["note"].notna().all():
        tooltip.append(nominal("note"))
    layers.append({"name": f"hover_{name}", "mark": {"type": "point", "opacity": 0},
                   **({"transform": [{"filter": f"datum.value <= {y_top}"}]} if y_top is not None else {}),
                   "encoding": {"x": x, "y": y, "tooltip": tooltip, **order}})
    return [{"data": data, **layer} for layer in layers]


def percent_top(frame: pd.DataFrame) -> float:
    """The utilisation axis's top: 100 %, unless a line passes it (CPU % of an unknown number of cores)."""
    return max(100.0, float(frame["value"].max())) if not frame.empty else 100.0


def _tradeoff_panel(frame: pd.DataFrame, markers: pd.DataFrame, data: Datasets, colour_by: str, x_name: str,
                    scale: dict, width: int = PANEL_WIDTH) -> dict:
    """Throughput against tokens/s per user, each point labelled with its sweep value: moving left along
    the curve buys throughput with every user's speed. The knee markers and working point are ringed."""
    empty = frame.empty
    source = data.add(frame if not empty else pd.DataFrame(columns=TRADEOFF_COLUMNS))
    speeds, values = (value_domain(frame, (column,), log=column == "speed") for column in ("speed", "value"))
    x = quantitative("speed", title="output tokens/s per user (1000 / ITL P50, log)",
                     scale={"type": "log", **({"domain": speeds, "nice": True} if speeds else {})})
    y = quantitative("value", title="output tokens/s", scale={"zero": True, **({"domain": values, "nice": True}
                                                                              if values else {})})
    overlay = colour_by == "run"
    colour = nominal("run", title=None, scale=scale, legend=None) if overlay else {"value": "#4c78a8"}
    opacity = when(LEGEND, 1.0, 0.12) if overlay else {"value": 1.0}
    layers = [
        {"mark": {"type": "line", "strokeWidth": 2},
         "encoding": {"x": x, "y": y, "color": colour, "detail": nominal("run"), "order": quantitative("x"),
                      "opacity": opacity}},
        {"mark": {"type": "point", "size": 30, "filled": True}, "encoding": {"x": x, "y": y, "color": colour,
                                                                           "opacity": opacity}},
        {"mark": {"type": "text", "dy": -9, "fontSize": LABEL_FONT, "color": "#555"},
         "encoding": {"x": x, "y": y, "text": quantitative("x", format="~g"), "opacity": opacity}},
        {"mark": {"type": "point", "size": 200, "filled": True},
         "encoding": {"x": x, "y": y, "color": colour, "opacity": when(HOVER, 1.0, 0.0)}},
    ]
    layers = [{"data": source, **layer} for layer in layers]
    ringed = frame.merge(markers[["run", "x", "kind"]], on=["run", "x"]) if not (empty or markers.empty) else frame
    if not empty and not markers.empty and not ringed.empty:
        layers.append({"data": data.add(ringed), "mark": {"type": "point", "size": 260, "strokeWidth": 2.2,
                                                          "filled": False},
                       "encoding": {"x": x, "y": y, "color": colour if overlay else MARKER_COLOUR}})
    layers.append({"data": source, "name": "hover_tradeoff", "mark": {"type": "point", "opacity": 0},
                   "encoding": {"x": x, "y": y, "tooltip": [
                       nominal("run"), quantitative("x", title=x_name, format="~g"),
                       nominal("shown", title="throughput"),
                       nominal("speed_shown", title="per user")]}})
    title = TITLES["tradeoff"] + (": no ITL recorded" if empty else
                                  f" — labels: {x_name}; leftwards, more throughput but slower for each user")
    return {"layer": layers, "resolve": {"scale": {"color": "independent"}}, "title": title,
            "width": width, "height": PANEL_HEIGHT}


MARKER_COLOUR = nominal("kind", scale={"domain": list(MARKER_COLOURS), "range": list(MARKER_COLOURS.values())},
                    legend=None)


def _marker_layers(markers: pd.DataFrame, source: dict, x: dict, labelled: bool, domain: list[float],
                   data: Datasets, colour: dict, width: int = PANEL_WIDTH) -> list[dict]:
    """Dashed vertical rules in `colour` (by marker kind, or in an overlay by run); with `labelled`, their
    labels above the panel, one row each where they would overlap (see `label_rows`)."""
    layers = [{"data": source, "mark": {"type": "rule", "strokeDash": [6, 3], "strokeWidth": 1.6},
               "encoding": {"x": x, "color": colour}}]
    if labelled:
        placed = label_rows(markers, domain, width)
        placed = placed.assign(y=-4 - placed["row"] * LABEL_ROW_PX)
        for align, dx in (("left", 3), ("right", -3)):
            side = placed[placed["align"] == align]
            if not side.empty:
                layers.append({"data": data.add(side), "mark": {
                    "type": "text", "align": align, "baseline": "bottom", "dx": dx, "fontSize": LABEL_FONT,
                    "fontWeight": "bold"}, "encoding": {"x": x, "y": quantitative("y", scale=None),
                                                        "text": nominal("label"),
                                                        "color": colour}})
    return layers


def _slo_label(slo: Any) -> str:
    return f"SLO: {LATENCY_METRICS.get(slo.metric, slo.metric)} P{slo.percentile} ≤ {slo.ms:g} ms"


def _level(data: Datasets, level: float, label: str, colour: str, align: str, dash: list[int] | None = (2, 2),
           width: int = PANEL_WIDTH) -> list[dict]:
    """A labelled horizontal line: the SLO (dashed, label at the left) or the capacity (solid, at the right)."""
    source = data.add(pd.DataFrame({"value": [level], "label": [label]}))
    rule = {"type": "rule", "color": colour, "strokeWidth": 1.5, **({"strokeDash": list(dash)} if dash else {})}
    x = {"value": 4} if align == "left" else {"value": width - 4}
    return [{"data": source, "mark": rule, "encoding": {"y": quantitative("value")}},
            {"data": source, "mark": {"type": "text", "align": align, "baseline": "bottom", "color": colour,
                                      "fontSize": 10, "dy": -2},
             "encoding": {"y": quantitative("value"), "x": x, "text": nominal("label")}}]
