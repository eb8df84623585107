"""Where things go in the linked panels (Run, History's overlay): their size, the rows of marker labels above
them, and when a roofline or a capacity line would flatten the measured curve and is left off the scale."""
from __future__ import annotations

import math

import pandas as pd

from batchscope.metric_catalogue import PANEL_UNITS, label

PANEL_WIDTH = 540  # two panels side by side fill a 1440 px window (wide layout, top navigation)
PANEL_HEIGHT = 200
PAGE_ROOM = 1440 - 2 * PANEL_WIDTH  # what a 1440 px window keeps beside two panels: padding, axes, the gap


WIDEST_DEFAULT_WINDOW = PAGE_ROOM + 2 * PANEL_WIDTH + 1  # the widest window whose panels are PANEL_WIDTH wide


def panel_width(window_width: int | None) -> int:
    """Each panel's width (Run, History's overlay) for the browser's window: two a row use the width there is
    (a 1920 px window gets 780 px panels, not 540 px with 480 px left empty), never narrower than at 1440 px."""
    if not window_width:
        return PANEL_WIDTH
    return max(PANEL_WIDTH, (int(window_width) - PAGE_ROOM) // 2)


TITLES = {"throughput": label("output_tokens_per_s"), "latency": f"latency ({PANEL_UNITS['latency']}, log)",
          "utilisation": f"utilisation ({PANEL_UNITS['utilisation']})", "memory": f"memory ({PANEL_UNITS['memory']})",
          "tradeoff": "throughput vs each user's speed"}
LABEL_FONT = 10
LABEL_CHAR_PX = 5.6  # the mean width of a marker label's character at LABEL_FONT
LABEL_ROW_PX = 13
ROOFLINE_ROOM = 2.0  # a roofline more than this many times the measured best would flatten the curve
OFF_SCALE = 1.15  # then the axis keeps this head room over the measured curve and the roofline is clipped
CAPACITY_SCALE_LIMIT = 10.0


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


def panel_title(name: str, frame: pd.DataFrame) -> str:
    return TITLES[name] if not frame.empty else f"{TITLES[name]}: no data recorded"


def throughput_top(name: str, frame: pd.DataFrame) -> float | None:
    """The throughput axis's top when the roofline prediction would flatten the measured curve (hf-generate
    reaches 1–4 % of it, a CPU run less), so the curve keeps the panel; None when everything fits."""
    if name != "throughput" or frame.empty:
        return None
    measured = frame[frame["series"] == "measured"]
    if measured.empty:
        return None
    best = float(measured[["value", "hi"]].max().max())
    return best * OFF_SCALE if float(frame["value"].max()) > ROOFLINE_ROOM * best else None


def value_domain(frame: pd.DataFrame, columns: tuple[str, ...] = ("value",), stacked: bool = False,
                 levels: tuple[float, ...] = (), log: bool = False) -> list[float] | None:
    """A panel's y domain from the data it draws (its `columns`, a stack's per-x totals, and level lines), so the
    chart never computes it from a dataset that is briefly empty while Streamlit redraws it at a new width
    (Vega logs "Infinite extent" then); None with nothing to draw. From 0, or the least positive value on a log
    scale; the scale rounds it (nice)."""
    if frame.empty:
        return None
    values = (frame.groupby(["run", "x"])["value"].sum() if stacked else
              pd.concat([pd.to_numeric(frame[c], errors="coerce") for c in columns if c in frame]))
    values = pd.concat([values, pd.Series(levels, dtype=float)]).dropna()
    values = values[values > 0] if log else values
    if values.empty:
        return None
    top = float(values.max())
    return [float(values.min()), top] if log else [0.0, top if top > 0 else 1.0]


def capacity_off_scale(frame: pd.DataFrame, capacity: pd.DataFrame, stacked: bool) -> str | None:
    """The capacity in words when drawing it would flatten the data (a CPU run's RAM vs a tiny model)."""
    if capacity.empty or frame.empty:
        return None
    used = frame.groupby(["run", "x"])["value"].sum().max() if stacked else frame["value"].max()
    top = float(capacity["value"].max())
    return f"{top:,.1f} GiB" if used > 0 and top > CAPACITY_SCALE_LIMIT * used else None


def log_domain(ticks: list[float]) -> list[float]:
    if not ticks:
        return [1, 2]
    lo, hi = min(ticks), max(ticks)
    return [lo / 1.25, hi * 1.25]
