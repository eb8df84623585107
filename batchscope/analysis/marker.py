"""A marker on the sweep axis (plateau, Kneedle, SLO limit, working point) and how its sentence reads."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Marker:
    """One highlighted x (a batch size, say) with a short label for the chart and one sentence for the page."""

    x: float
    label: str
    sentence: str

    def __post_init__(self) -> None:
        # markers are built from pandas rows: a numpy scalar must not leak into JSON or sentences
        object.__setattr__(self, "x", float(self.x))

    def to_dict(self) -> dict:
        return asdict(self)


def num(value: float) -> str:
    """A rounded number with spaces between thousands ("2 310", "50", "2.8", "0.0163"), the way the page prints them."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}".replace(",", " ")
    return f"{value:.3g}"


def pct(fraction: float, decimals: int = 0) -> str:
    """A fraction as a percentage ("6 %"); with decimals, trailing zeros go ("10.4 %", "5 %").

    Gains are compared with a threshold, so they print one decimal: a 10.4 % step must not read
    "10 %" next to a 10 % threshold.
    """
    text = f"{fraction * 100:.{decimals}f}"
    return (text.rstrip("0").rstrip(".") if decimals else text) + " %"
