"""The charts outside the Run grid: Home's glance at the latest runs, New sweep's length preview and
History's memory split side by side."""
from __future__ import annotations

import json
from collections.abc import Mapping

import altair as alt
import pandas as pd

from batchscope.charts.frames import EMPTY_LONG, concat, memory_frame
from batchscope.charts.layout import PANEL_HEIGHT, PANEL_WIDTH, log_domain
from batchscope.charts.palette import memory_colour
from batchscope.charts.vega import nominal, quantitative
from batchscope.units import value_text

HOME_BARS_PX = 260  # the bars' width beside their labels in Home's narrower column, given in pixels: a chart asked to
# fit its container cannot also give a bar per row (Vega-Lite drops the fit with a console warning)


def best_throughput_chart(runs: pd.DataFrame) -> dict:
    """Home's glance at the latest runs: each one's best output tokens/s, coloured by how it ended (a
    cancelled one-point run reads as the stub it is)."""
    frame = runs.assign(label=runs["name"].fillna(runs["run_id"]), best=runs["best_output_tokens_per_s"].fillna(0.0),
                        shown=[value_text(v, "tok/s") if pd.notna(v) else "no finished point"
                               for v in runs["best_output_tokens_per_s"]])[
        ["label", "best", "shown", "state", "points_ok"]]
    return {"$schema": "https://vega.github.io/schema/vega-lite/v6.json",
            "data": {"values": json.loads(frame.to_json(orient="records"))}, "height": {"step": 22},
            "width": HOME_BARS_PX, "autosize": {"type": "pad"},
            "mark": {"type": "bar", "cornerRadiusEnd": 3},
            "encoding": {"y": nominal("label", title=None, sort=None, axis={"labelLimit": 200}),
                         "x": quantitative("best", title="best output tokens/s",  # fixed: see layout.value_domain
                                           scale={"domain": [0.0, float(frame["best"].max()) or 1.0], "nice": True}),
                         "color": nominal("state", title=None, legend={"orient": "bottom"}),
                         "tooltip": [nominal("label", title="run"), nominal("shown", title="best"), nominal("state"),
                                     quantitative("points_ok", title="ok points")]}}


def length_histogram(lengths: list[int], title: str) -> alt.Chart:
    """The New sweep preview: how the sampled prompt or output lengths are spread."""
    frame = pd.DataFrame({"tokens": lengths})
    # whole tokens, from the shortest to one past the longest: a fixed length is one bar one token wide (a
    # nice-rounded bin drew fixed:128 from 125.0 to 130.0)
    extent = [min(lengths), max(lengths) + 1] if lengths else None
    return alt.Chart(frame).mark_bar(color="#4c78a8").encode(
        x=alt.X("tokens:Q", bin=alt.Bin(maxbins=40, minstep=1, extent=extent), title=f"{title} (tokens)",
                axis=alt.Axis(format="d")),
        y=alt.Y("count():Q", title="requests"),
        tooltip=[alt.Tooltip("count():Q", title="requests")],
    ).properties(height=140)


def memory_split_by_run(splits_by_run: Mapping[str, pd.DataFrame]) -> alt.FacetChart:
    """The stacked memory split of each run side by side, one small panel per run on shared scales,
    so a smaller weights band (a quantised model) or a taller KV band reads at a glance."""
    frames = [memory_frame(split[split["status"] == "ok"] if "status" in split else split, run)
              for run, split in splits_by_run.items()]
    frame = concat(frames, EMPTY_LONG + ["order", "note"])
    ticks = sorted(set(frame["x"].astype(float))) if not frame.empty else []
    whole = all(float(t).is_integer() for t in ticks)
    x = alt.X("x:Q", title=None, scale=alt.Scale(type="log", base=2, domain=log_domain(ticks)),
              axis=alt.Axis(values=ticks or [1], format="d" if whole else "~g", labelOverlap="greedy"))
    area = alt.Chart(frame).mark_area(opacity=0.85, line=True).encode(
        x=x, y=alt.Y("value:Q", stack="zero", title="memory (GiB)"),
        color=alt.Color(**memory_colour(frame["series"])), order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("run:N"), alt.Tooltip("series:N", title="part"), alt.Tooltip("x:Q"),
                 alt.Tooltip("shown:N", title="size"), alt.Tooltip("note:N", title="total")])
    width = max(160, 2 * PANEL_WIDTH // max(1, len(splits_by_run)) - 20)
    return area.properties(width=width, height=PANEL_HEIGHT).facet(
        column=alt.Column("run:N", title=None, sort=list(splits_by_run), header=alt.Header(labelLimit=width)),
    ).configure_legend(orient="bottom", columns=3)
