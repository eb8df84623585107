"""Inside one point: what each step of one repeat held — slots, KV cache, token mix — over time.

The four linked charts give a point one number per metric. An online-serving point's story is in its
steps: requests filling the slots up to max_num_seqs, the KV cache filling towards capacity (where
admission must wait), prefill chunks interleaved with decode. Frames are built in pandas (testable);
Altair only draws them. No streamlit here.
"""
from __future__ import annotations

import math

import altair as alt
import pandas as pd

from batchscope.charts import palette

MAX_POINTS = 1500  # per series: more steps than this are averaged in equal runs of consecutive steps
WIDTH, HEIGHT = 700, 150
COLUMNS = ["t_s", "series", "value"]


def timeline_frames(steps: pd.DataFrame, kv_capacity_tokens: float | None, kv_block_size: float | None = None
                    ) -> tuple[dict[str, pd.DataFrame], int]:
    """Long frames (t_s, series, value) per panel for one point's repeat, and how many steps each drawn
    value averages (1 when none are).

    Panels: "slots" (requests holding a slot; the decode width run, bucket padding included), "kv" (KV
    cache occupancy in % of capacity, or tokens held when the capacity is unknown; on a paged pool also
    the blocks in use, whole blocks, in % of the pool), "tokens" (prefill and decode tokens per step;
    continuous runs only), "preemptions" (requests preempted so far, when any was). A panel whose
    columns hold no data is left out.
    """
    ordered = steps.sort_values("start_ms")
    if "preemptions" in ordered:
        ordered = ordered.assign(preempted=ordered["preemptions"].cumsum() if ordered["preemptions"].gt(0).any()
                                 else float("nan"))
    per_value = max(1, math.ceil(len(ordered) / MAX_POINTS))
    if per_value > 1:
        groups = pd.Series(range(len(ordered)), index=ordered.index) // per_value
        ordered = ordered.groupby(groups).mean(numeric_only=True)
    t_s = ordered["start_ms"] / 1000.0
    kv_series = ("KV cache occupancy (%)", 100.0 * ordered["active_tokens"] / kv_capacity_tokens) \
        if kv_capacity_tokens else ("KV tokens held", ordered["active_tokens"])
    blocks = ordered.get("kv_blocks")
    blocks_series = ("KV blocks in use (% of pool)", 100.0 * blocks * kv_block_size / kv_capacity_tokens) \
        if blocks is not None and kv_block_size and kv_capacity_tokens else ("KV blocks in use", None)
    panels = {
        "slots": [("requests in a slot", ordered["active_seqs"]),
                  ("decode width run (bucket)", ordered["batch_rows"])],
        "kv": [kv_series, blocks_series],
        "tokens": [("prefill tokens", ordered.get("prefill_tokens")), ("decode tokens", ordered.get("decode_tokens"))],
        "preemptions": [("requests preempted so far", ordered.get("preempted"))],
    }
    frames = {}
    for name, series in panels.items():
        parts = [pd.DataFrame({"t_s": t_s, "series": label, "value": values.astype(float)})
                 for label, values in series if values is not None and values.notna().any()]
        if parts:
            frames[name] = pd.concat(parts, ignore_index=True).dropna(subset=["value"])
    return frames, per_value


def split_tokens(frames: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The token mix as one panel per kind, each on its own scale: a prefill chunk of thousands of tokens
    would flatten the decode tokens (one per running request, tens) to a line at 0 on a shared axis."""
    tokens = frames.get("tokens")
    if tokens is None:
        return frames
    split: dict[str, pd.DataFrame] = {}
    for name, frame in frames.items():
        if name != "tokens":
            split[name] = frame
            continue
        for series in ("decode tokens", "prefill tokens"):
            part = frame[frame["series"] == series]
            if not part.empty:
                split[f"{series} per step"] = part
    return split


def timeline_chart(steps: pd.DataFrame, kv_capacity_tokens: float | None, max_num_seqs: float | None,
                   kv_block_size: float | None = None, window_ms: tuple[float, float] | None = None
                   ) -> alt.VConcatChart | None:
    """Stacked panels on one time axis, with the max_num_seqs and 100 % capacity lines where known and the
    repeat's load window (`window_ms`, whose tokens its throughput counts) shaded; None when the steps hold
    nothing to draw."""
    frames, per_value = timeline_frames(steps, kv_capacity_tokens, kv_block_size)
    if not frames:
        return None
    x = alt.X("t_s:Q", title="time in the repeat (s)")
    titles = {"slots": "slots: requests admitted and decode width", "kv": "KV cache",
              "preemptions": "preemptions: requests whose KV was freed for others and recomputed later"}
    limits = {"slots": (max_num_seqs, f"max_num_seqs {max_num_seqs:g}" if max_num_seqs else ""),
              "kv": (100.0 if kv_capacity_tokens else None, "capacity")}
    panels = []
    for name, frame in split_tokens(frames).items():
        colour = alt.Color("series:N", title=None, scale=alt.Scale(scheme="tableau10"),
                           legend=alt.Legend(orient="right", labelLimit=260))
        line = alt.Chart(frame).mark_line(interpolate="step-after", strokeWidth=1.5).encode(
            x=x, y=alt.Y("value:Q", title=None), color=colour,
            tooltip=[alt.Tooltip("series:N"), alt.Tooltip("t_s:Q", title="s", format=",.3f"),
                     alt.Tooltip("value:Q", format=",.2f")])
        layers: list[alt.Chart] = [line]
        if window_ms is not None:
            band = pd.DataFrame({"from_s": [window_ms[0] / 1000.0], "to_s": [window_ms[1] / 1000.0]})
            tooltip = [alt.Tooltip("from_s:Q", title="load window from (s)", format=",.3f"),
                       alt.Tooltip("to_s:Q", title="to (s)", format=",.3f")]
            layers.insert(0, alt.Chart(band).mark_rect(color=palette.LOAD_WINDOW, opacity=0.25).encode(
                x="from_s:Q", x2="to_s:Q", tooltip=tooltip))
        level, label = limits.get(name, (None, ""))
        if level:
            rule = pd.DataFrame({"value": [float(level)], "label": [label]})
            layers += [alt.Chart(rule).mark_rule(color="black", strokeDash=[4, 3]).encode(y="value:Q"),
                       alt.Chart(rule).mark_text(align="left", baseline="bottom", dy=-2, fontSize=10).encode(
                           y="value:Q", x=alt.value(4), text="label:N")]
        title = titles.get(name, name) + (f" (each value averages {per_value} steps)" if per_value > 1 else "")
        panels.append(alt.layer(*layers).properties(title=title, width=WIDTH, height=HEIGHT))
    return alt.vconcat(*panels, spacing=12).resolve_scale(x="shared", color="independent").configure_title(
        anchor="start", fontSize=13)
