"""The units the app prints, each defined once: byte sizes (KiB, MiB, GiB), milliseconds, tokens per
second and percentages. A table header, a chart's tooltip and an Explain sentence then say the same
size the same way. (runners/ keeps its own constants: the app does not import the runner for arithmetic.)
"""
from __future__ import annotations

import math

from batchscope.analysis.marker import num

KiB, MiB, GiB = 1024, 1024**2, 1024**3


def ms(milliseconds: float) -> str:
    """A duration as the sentences print it ("1.87 ms", "2 310 ms")."""
    return f"{num(float(milliseconds))} ms"


def tok_s(value: float) -> str:
    """Throughput as the sentences print it ("2 310 tok/s")."""
    return f"{num(value)} tok/s"


def pct_value(percent: float | None) -> str:
    """A value already in percent ("98 %")."""
    return "n/a" if percent is None else f"{float(percent):.0f} %"


def size(n_bytes: float | None) -> str:
    """Bytes as "2.3 GiB", "19 MiB", "6 KiB"."""
    if n_bytes is None or (isinstance(n_bytes, float) and math.isnan(n_bytes)):
        return "an unknown amount"
    n = float(n_bytes)
    if n >= GiB:
        return f"{n / GiB:.1f} GiB"
    if n >= MiB:
        return f"{n / MiB:.0f} MiB"
    return f"{n / KiB:.0f} KiB" if n >= KiB else f"{n:.0f} B"


def value_text(value: float, unit: str) -> str:
    """A value with its unit as a tooltip shows it: "3 582 tok/s", "1.87 ms", "97.5 %", "12.30 GiB", "96 MiB"."""
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "GiB" and value < 1:
        return f"{value * 1024:,.0f} MiB" if value * 1024 >= 1 else f"{value * 1024 * 1024:,.0f} KiB"
    if unit == "GiB":
        return f"{value:,.2f} GiB"
    return f"{num(value)} {unit}"
