"""One colour per thing on every page: each metric's series, the roofline, the memory parts, the knee
markers, and each run of an overlay. A series keeps its colour whichever panel, page or run draws it, and
the roofline's grey is never a measured metric's colour (it is a prediction, drawn dashed)."""
from __future__ import annotations

import re
from collections.abc import Iterable

# One colour per memory part on every page (Run, History, Explain), listed in stacking order, bottom up; last,
# an endpoint's whole device in use (its model runs in the server, so it has no split), a neutral grey.
MEMORY_COLOURS = {"weights": "#4c78a8", "KV cache (used)": "#f58518", "KV cache (allocated, unused)": "#ffbf79",
                  "activations + workspace": "#54a24b", "allocator reserve": "#b279a2",
                  "CUDA context + other": "#9d755d", "memory in use (NVML)": "#a9a9a9"}
MARKER_COLOURS = {"plateau": "#1b9e77", "kneedle": "#7570b3", "SLO limit": "#d95f02",
                  "working point": "#e7298a", "OOM": "#d62728"}
TABLEAU10 = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d",
             "#bab0ac")
ROOFLINE = "#79706e"  # every roofline prediction (throughput, decode step): grey, dashed
LOAD_WINDOW = "#bab0ac"  # the band of a continuous repeat's steps whose tokens its throughput counts (pale grey)
# A series' colour by how its name starts (the metric catalogue's words; a latency's percentile and a GPU's
# number follow). Throughput is blue wherever it is drawn, TTFT purple with its queue wait a paler purple.
SERIES_COLOURS = (
    ("roofline", ROOFLINE),
    ("measured decode step", "#2f4b7c"), ("decode step", "#2f4b7c"),
    ("measured", "#4c78a8"), ("output tokens/s", "#4c78a8"), ("throughput", "#4c78a8"),
    ("TTFT", "#8e4b9e"), ("queue wait", "#c59ad3"), ("ITL", "#b79a20"), ("E2E", "#9e765f"),
    ("GPU util (NVML)", "#439894"),
    ("memory-controller util", "#e0b52b"), ("SM util", "#6baed6"), ("tensor active", "#5aae61"),
    ("DRAM bandwidth util", "#e45756"), ("process CPU", "#17becf"), ("all-reduce", "#f28e2b"),
)
# Series drawn dashed: predictions, and a part drawn over the whole it belongs to (queue wait is part of TTFT).
DASHED = ("roofline", "queue wait", "throughput (% of its best)")


GPU_SHADES = ("#439894", "#83bcb6", "#2c6e6b", "#b3dcd8")  # one GPU util line per GPU: shades of its colour


def series_colour(series: str) -> str:
    """The colour of one series, by the metric it draws; an unknown one gets a stable colour of its own."""
    gpu = re.search(r", GPU (\d+)$", series)
    if gpu:
        return GPU_SHADES[int(gpu.group(1)) % len(GPU_SHADES)]
    for start, colour in SERIES_COLOURS:
        if series.startswith(start):
            return colour
    return TABLEAU10[sum(map(ord, series)) % len(TABLEAU10)]


def series_scale(series: Iterable[str]) -> dict:
    """A colour scale whose domain is the series drawn, each in its own colour (see `series_colour`)."""
    domain = list(dict.fromkeys(str(s) for s in series))
    return {"domain": domain, "range": [series_colour(s) for s in domain]}


def is_dashed(series: str) -> bool:
    return series.startswith(DASHED)


def dash_test(series: Iterable[str]) -> str:
    """A Vega expression true for the series drawn dashed among these ("false" when none is)."""
    dashed = sorted({str(s) for s in series if is_dashed(str(s))})
    return " || ".join(f"datum.series === {_quoted(s)}" for s in dashed) or "false"


def _quoted(text: str) -> str:
    return "'" + re.sub(r"(['\\\\])", r"\\\1", text) + "'"


def run_scale(runs: list[str]) -> dict:
    """One colour per run, in the order the runs were picked, for every layer of every panel: the panels'
    colour scales are independent, so an explicit domain is what keeps a run's colour the same in all."""
    return {"domain": runs, "range": [TABLEAU10[i % len(TABLEAU10)] for i in range(len(runs))]}


def memory_colour(drawn: Iterable[str], title: str | None = "memory", legend: dict | None = None) -> dict:
    """The memory parts' colour encoding every page uses: each part its fixed colour, the legend naming the
    parts `drawn` (a chart's series) in stacking order; with none drawn, every part."""
    shown = set(drawn)
    parts = [part for part in MEMORY_COLOURS if part in shown] or list(MEMORY_COLOURS)
    return {"field": "series", "type": "nominal", "title": title,
            "scale": {"domain": parts, "range": [MEMORY_COLOURS[part] for part in parts]},
            "sort": parts,  # three columns hold the longest part's name uncut
            "legend": legend or {"orient": "bottom", "columns": 3, "labelLimit": 0}}
