"""One colour per thing on every page: the memory parts, the knee markers, and each run of an overlay."""
from __future__ import annotations

# One colour per memory part on every page (Run, History, Explain), listed in stacking order, bottom up.
MEMORY_COLOURS = {"weights": "#4c78a8", "KV cache (used)": "#f58518", "KV cache (allocated, unused)": "#ffbf79",
                  "activations + workspace": "#54a24b", "allocator reserve": "#b279a2",
                  "CUDA context + other": "#9d755d"}
MARKER_COLOURS = {"plateau": "#1b9e77", "kneedle": "#7570b3", "SLO limit": "#d95f02",
                  "working point": "#e7298a", "OOM": "#d62728"}
TABLEAU10 = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d",
             "#bab0ac")


def run_scale(runs: list[str]) -> dict:
    """One colour per run, in the order the runs were picked, for every layer of every panel: the panels'
    colour scales are independent, so an explicit domain is what keeps a run's colour the same in all."""
    return {"domain": runs, "range": [TABLEAU10[i % len(TABLEAU10)] for i in range(len(runs))]}


def memory_colour(title: str | None = "memory", legend: dict | None = None) -> dict:
    """The memory parts' colour encoding every page uses: fixed colours, legend in stacking order."""
    return {"field": "series", "type": "nominal", "title": title,
            "scale": {"domain": list(MEMORY_COLOURS), "range": list(MEMORY_COLOURS.values())},
            "sort": list(MEMORY_COLOURS), "legend": legend or {"orient": "bottom", "columns": 3}}
