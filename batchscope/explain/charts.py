"""One Altair chart per Explain step: a single panel that shows only what that step's sentences read.

The Run page's linked panels answer every question at once; a room following a presenter needs one
question per chart, so these are single panels built from the same frames (`batchscope.charts`).
No streamlit here.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt
import pandas as pd

from batchscope.charts import frames, layout, palette
from batchscope.analysis.axis import sweep_x

WIDTH, HEIGHT = 720, 260  # a step's plot, px
EMPTY = ["x", "series", "value", "dashed"]
GPU_UTILISATION = ("gpu_util_pct", "sm_util_pct", "tensor_active_pct", "dram_bw_util_pct")
MEETS, MISSES = "#1b9e77", "#d62728"
RULE_COLOURS = {**palette.MARKER_COLOURS, "ridge": "#555555"}


def throughput_chart(table: pd.DataFrame, analysis: Any) -> alt.LayerChart:
    """Measured output tokens/s with its repeat band, and the plateau, Kneedle and OOM rules."""
    frame = frames.throughput_frame(table)
    frame = frame[frame["series"] == "measured"].assign(series="measured output tok/s", dashed=False)
    x = batch_x(table)
    layers = lines(frame, x, "output tokens/s")
    if not frame.empty:
        band = alt.Chart(frame).mark_area(opacity=0.18, color=palette.series_colour("measured")).encode(x=x, y="lo:Q", y2="hi:Q")
        layers.insert(0, band)
    rules = frames.marker_frame(analysis, table, kinds=("plateau", "kneedle", "OOM"))
    return panel(layers + marker_rules(rules, x), titled(frame, "output tokens/s (band: min–max of repeats)"))


def latency_chart(table: pd.DataFrame, percentile: int = 95) -> alt.LayerChart:
    """TTFT and ITL at the presenter's percentile per batch, on a log scale (they differ by orders of magnitude)."""
    frame = frames.latency_frame(table, percentile, metrics=("ttft", "itl"))
    frame = frame[frame["series"] != frames.ROOFLINE_STEP_SERIES].assign(dashed=False)
    return panel(lines(frame, batch_x(table), "latency (ms, log)", log=True),
                 titled(frame, f"P{percentile} latency (ms, log)"))


def utilisation_chart(table: pd.DataFrame, cpu_cores: int | None = None) -> alt.LayerChart:
    """GPU busy-time and GPM counters (or CPU %, of the run's `cpu_cores` when known) with throughput as % of
    its best, and the 90 % line, on 0–100 %."""
    gpu = "gpu_util_pct" in table and table["gpu_util_pct"].notna().any()
    columns = {c: frames.UTILISATION_COLUMNS[c] for c in (GPU_UTILISATION if gpu else ("cpu_pct",))}
    frame = frames.utilisation_frame(table, columns=columns, cpu_cores=cpu_cores).assign(dashed=False)
    measured = frames.throughput_frame(table)
    measured = measured[measured["series"] == "measured"]
    if not measured.empty:
        share = measured.assign(series="throughput (% of its best)", value=100 * measured["value"] / measured["value"].max(),
                                dashed=True)
        frame = pd.concat([frame, share[frame.columns]], ignore_index=True)
    layers = lines(frame, batch_x(table), "% of time / of best", top=max(100.0, float(frame["value"].max()))
                   if not frame.empty else 100.0)
    if gpu:
        layers += level_rule(90.0, "90 % busy", "#555")
    return panel(layers, titled(frame, f"{'GPU' if gpu else 'CPU'} utilisation (%) and throughput (% of its best)"))


def memory_chart(table: pd.DataFrame, split: pd.DataFrame, on_gpu: bool = True) -> alt.LayerChart:
    """Memory per finished batch, stacked by part (on a CPU only the parts it measures), with the capacity
    line and OOM rules."""
    ok_split = frames.measured_parts(split[split["status"] == "ok"] if "status" in split else split, on_gpu)
    frame = frames.memory_frame(ok_split)
    x = batch_x(table)
    base = alt.Chart(frame if not frame.empty else pd.DataFrame(columns=EMPTY + ["order"]))
    colour = alt.Color(**palette.memory_colour(frame["series"], None, {"orient": "bottom"}))  # columns: fit_legend
    layers: list[alt.Chart] = [base.mark_area(opacity=0.85, line=True).encode(
        x=x, y=alt.Y("value:Q", stack="zero", title="memory (GiB)"), color=colour, order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("series:N", title="part"), alt.Tooltip("x:Q", title="batch"),
                 alt.Tooltip("value:Q", title="GiB", format=",.2f")])]
    title = titled(frame, "memory (GiB), stacked")
    capacity = frames.capacity_frame(table)
    if not capacity.empty:
        used = frame.groupby("x")["value"].sum().max() if not frame.empty else 0.0
        top = float(capacity["value"].iloc[0])
        if used > 0 and top > layout.CAPACITY_SCALE_LIMIT * used:
            title += f" — capacity {top:,.1f} GiB is off the scale"
        else:
            layers += level_rule(top, str(capacity["label"].iloc[0]), "black")
    oom = frames.marker_frame(None, table, kinds=("OOM",))
    return panel(layers + marker_rules(oom, x), title)


def roofline_chart(table: pd.DataFrame, ridge: float | None) -> alt.LayerChart:
    """Measured decode step vs the roofline floor (log scale), and the ridge batch when it is in view."""
    ok = table[table["status"] == "ok"] if "status" in table else table
    parts = [pd.DataFrame({"x": sweep_x(ok), "series": name, "value": ok[column], "dashed": dashed})
             for column, name, dashed in (("decode_step_ms", "measured decode step", False),
                                          ("predicted_step_ms", "roofline floor", True)) if column in ok]
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=EMPTY)
    frame = frame.assign(value=pd.to_numeric(frame["value"], errors="coerce")).dropna(subset=["value"])
    frame = frame[frame["value"] > 0]
    batches = frames.axis_values(table)
    title = titled(frame, "decode step (ms, log)")
    in_view = ridge is not None and batches and batches[0] / 4 <= ridge <= batches[-1] * 4
    x = batch_x(table, extra=(ridge,) if in_view else ())
    layers = lines(frame, x, "ms per decode step (log)", log=True)
    if in_view:
        layers += marker_rules(pd.DataFrame({"x": [ridge], "kind": ["ridge"],
                                             "label": [f"ridge ≈ {ridge:,.0f}"]}), x)
    elif ridge is not None:
        title += f" — ridge ≈ {ridge:,.0f}, off the scale"
    return panel(layers, title)


def working_point_chart(table: pd.DataFrame, analysis: Any, slo: Any) -> alt.LayerChart:
    """The SLO's latency per batch, points green when they meet it, the SLO line and the working point."""
    metric, percentile = (slo.metric, slo.percentile) if slo is not None else ("ttft", 95)
    frame = frames.latency_frame(table, percentile, metrics=(metric,))
    frame = frame[frame["series"] != frames.ROOFLINE_STEP_SERIES].assign(dashed=False)
    tput = frames.throughput_frame(table)
    tput = tput[tput["series"] == "measured"][["x", "value"]].rename(columns={"value": "tok_s"})
    frame = frame.merge(tput, on="x", how="left")
    x = batch_x(table)
    y_title = f"{frames.LATENCY_METRICS[metric]} P{percentile} (ms, log)"
    y = alt.Y("value:Q", title=y_title, scale=alt.Scale(type="log"))
    base = alt.Chart(frame if not frame.empty else pd.DataFrame(columns=EMPTY + ["tok_s"]))
    meets = (alt.condition(f"datum.value <= {float(slo.ms)}", alt.value(MEETS), alt.value(MISSES))
             if slo is not None else alt.value("#4c78a8"))
    tooltip = [alt.Tooltip("x:Q", title="batch"), alt.Tooltip("value:Q", title="ms", format=",.1f"),
               alt.Tooltip("tok_s:Q", title="output tok/s", format=",.0f")]
    layers: list[alt.Chart] = [base.mark_line(color="#888").encode(x=x, y=y),
                               base.mark_point(size=110, filled=True).encode(x=x, y=y, color=meets, tooltip=tooltip)]
    if slo is not None:
        layers += level_rule(float(slo.ms), f"SLO {slo.name} ≤ {slo.ms:g} ms", MISSES)
    rules = frames.marker_frame(analysis, table, kinds=("working point", "SLO limit", "OOM"))
    return panel(layers + marker_rules(rules, x), titled(frame, y_title))


def contrast_chart(tables: Mapping[str, pd.DataFrame]) -> alt.HConcatChart:
    """Two panels side by side, one colour per engine: throughput, and decode step (log)."""
    return runs_chart(tables, (("output_tokens_per_s", "output tokens/s", False),
                               ("decode_step_ms", "decode step (ms, log)", True)), legend="engine")


def runs_chart(tables: Mapping[str, pd.DataFrame], panels: Sequence[tuple[str, str, bool]], legend: str = "run",
               x_title: str = "batch size (log2)", level: tuple[str, float, str] | None = None) -> alt.HConcatChart:
    """Panels side by side, one per (column, title, log), one colour per run, on the runs' shared x axis;
    `level` = (column, value, label) draws a labelled horizontal line (an SLO) on that column's panel."""
    x = batch_x(*tables.values(), title=x_title)
    scale = alt.Scale(**palette.run_scale(list(tables)))
    # the points take the lines' very colour encoding, legend and all: one legend, where a legendless second
    # encoding of the same field made Vega-Lite warn of conflicting legends
    colour = alt.Color("run:N", title=legend, scale=scale, legend=alt.Legend(orient="bottom", columns=1, labelLimit=0))
    charts_ = []
    for column, title, log in panels:
        found = []
        for label, table in tables.items():
            ok = table[table["status"] == "ok"] if "status" in table else table
            if column in ok:
                found.append(pd.DataFrame({"run": label, "x": sweep_x(ok),
                                           "value": pd.to_numeric(ok[column], errors="coerce")}).dropna())
        found = [f[f["value"] > 0] if log else f for f in found if not f.empty]
        frame = pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=["run", "x", "value"])
        y = alt.Y("value:Q", title=title, scale=alt.Scale(type="log") if log else alt.Scale(zero=True))
        base = alt.Chart(frame)
        tooltip = [alt.Tooltip("run:N", title=legend), alt.Tooltip("x:Q", title="x"),
                   alt.Tooltip("value:Q", format=",.2f")]
        layers = [base.mark_line(strokeWidth=2.5).encode(x=x, y=y, color=colour),
                  base.mark_point(size=50, filled=True).encode(x=x, y=y, color=colour, tooltip=tooltip)]
        if level is not None and level[0] == column:
            layers += level_rule(level[1], level[2], MISSES)
        charts_.append(alt.layer(*layers).properties(title=titled(frame, title), width=WIDTH // len(panels) - 30,
                                                     height=HEIGHT))
    # sized by their panels: Streamlit's theme asks every chart to fit its container, which side-by-side panels
    # cannot (Vega-Lite drops it with a console warning)
    return alt.hconcat(*charts_).properties(autosize=alt.AutoSizeParams(type="pad")).configure_title(
        anchor="start", fontSize=14)


LEGEND_ITEM_EMS = 18  # a legend entry's width in label font sizes: symbol, padding and the longest label
# ("KV cache (allocated, unused)", 28 characters of about 0.55 em), so no series name is cut
PAGE_FONT = 13  # a step's title size on the page (its legend labels one smaller), present mode grows it


def fit_legend(chart: alt.TopLevelMixin, panel: int, font: int) -> alt.TopLevelMixin:
    """A bottom legend wrapped into as many columns as a `panel` px wide panel holds, each label cut only past
    its column (one row of every series ran past the chart's edge and hid the last ones)."""
    item = LEGEND_ITEM_EMS * (font - 1)
    return chart.configure_legend(labelFontSize=font - 1, titleFontSize=font, columns=max(1, panel // item),
                                  labelLimit=item - 2 * font)


def resize(chart: alt.TopLevelMixin, width: int, height: int, font: int = 15) -> alt.TopLevelMixin:
    """A copy drawn larger, for present mode: side-by-side panels share the width, fonts grow, and a bottom
    legend wraps into the columns the panel's width holds."""
    big = chart.copy(deep=True)
    if isinstance(big, alt.HConcatChart):
        panel = width // len(big.hconcat)
        for sub in big.hconcat:
            sub.width, sub.height = panel - 40, height
    else:  # present mode's whole chart, axes and legend included, fits the room below the controls
        panel = width
        big = big.properties(width=width, height=height, autosize=alt.AutoSizeParams(type="fit", contains="padding"))
    return fit_legend(big.configure_axis(labelFontSize=font - 2, titleFontSize=font), panel, font).configure_title(
        anchor="start", fontSize=font + 3)


# ---- building blocks ----

def batch_x(*tables: pd.DataFrame, extra: tuple[float, ...] = (), title: str = "batch size (log2)") -> alt.X:
    """The log2 batch axis, ticked at every batch the tables hold; `extra` values are kept in view too."""
    batches = frames.axis_values(*tables)
    span = batches + list(extra) or [1, 2]
    return alt.X("x:Q", title=title,
                 scale=alt.Scale(type="log", base=2, domain=[min(span) / 1.25, max(span) * 1.25]),
                 axis=alt.Axis(values=batches or [1], format="d", labelOverlap="greedy"))


def lines(frame: pd.DataFrame, x: alt.X, y_title: str, log: bool = False, top: float | None = None
          ) -> list[alt.LayerChart]:
    """One line per series in its palette colour, with points and a tooltip; series flagged `dashed`, and
    those the palette draws dashed (predictions, a part over its whole), are dashed. `top` fixes the y
    axis's top (100 for percentages)."""
    if not frame.empty:
        frame = frame.assign(dashed=frame["dashed"].astype(bool) | frame["series"].map(palette.is_dashed))
    base = alt.Chart(frame if not frame.empty else pd.DataFrame(columns=EMPTY))
    scale = (alt.Scale(type="log") if log else alt.Scale(zero=True, domain=[0, top]) if top is not None
             else alt.Scale(zero=True))
    y = alt.Y("value:Q", title=y_title, scale=scale)
    colours = alt.Scale(**palette.series_scale(frame["series"]))
    colour = alt.Color("series:N", title=None, scale=colours, legend=alt.Legend(orient="bottom"))
    dash = alt.condition("datum.dashed", alt.value([6, 4]), alt.value([1, 0]))
    tooltip = [alt.Tooltip("series:N"), alt.Tooltip("x:Q", title="batch"),
               alt.Tooltip("value:Q", format=",.3~f")]
    # one layer of its own: its line and points share one colour scale and so one legend, while the panel keeps
    # the marker rules' colours apart (resolve independent)
    return [alt.layer(base.mark_line(strokeWidth=2.5).encode(x=x, y=y, color=colour, strokeDash=dash),
                      base.mark_point(size=60, filled=True).encode(x=x, y=y, color=colour, tooltip=tooltip))]


def marker_rules(markers: pd.DataFrame, x: alt.X) -> list[alt.Chart]:
    """Labelled dashed vertical rules in the marker colours the Run page uses."""
    if markers.empty:
        return []
    colour = alt.Color("kind:N", scale=alt.Scale(domain=list(RULE_COLOURS), range=list(RULE_COLOURS.values())),
                       legend=None)
    base = alt.Chart(markers)
    last = float(markers["x"].max())
    layers = [base.mark_rule(strokeDash=[6, 3], strokeWidth=2).encode(x=x, color=colour)]
    for keep, align, dx in ((alt.datum.x < last, "left", 4), (alt.datum.x >= last, "right", -4)):
        layers.append(base.transform_filter(keep).mark_text(
            align=align, baseline="top", dx=dx, fontSize=12, fontWeight="bold").encode(
            x=x, y=alt.value(4), text="label:N", color=colour))
    return layers


def level_rule(level: float, label: str, colour: str) -> list[alt.Chart]:
    """A labelled horizontal line: a threshold, an SLO or the device capacity."""
    base = alt.Chart(pd.DataFrame({"value": [level], "label": [label]}))
    return [base.mark_rule(color=colour, strokeDash=[2, 2], strokeWidth=1.6).encode(y="value:Q"),
            base.mark_text(align="left", baseline="bottom", dy=-3, color=colour, fontSize=12).encode(
                y="value:Q", x=alt.value(6), text="label:N")]


def titled(frame: pd.DataFrame, title: str) -> str:
    return title if not frame.empty else f"{title}: no data recorded"


def panel(layers: list[alt.Chart], title: str) -> alt.LayerChart:
    """One step's chart: its plot WIDTH × HEIGHT, axes and legend around it (fitted into that size, a legend of
    two rows left a plot 130 px tall)."""
    return fit_legend(alt.layer(*layers).resolve_scale(color="independent").properties(
        title=title, width=WIDTH, height=HEIGHT, autosize=alt.AutoSizeParams(type="pad")), WIDTH, PAGE_FONT)
