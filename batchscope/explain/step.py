"""One step of the Explain walk: a chart and the two sentences that read it."""
from __future__ import annotations

from dataclasses import dataclass

import altair as alt

@dataclass(frozen=True)
class Step:
    """One step of the walk-through: a chart and the two sentences that read it."""

    key: str
    title: str
    chart: alt.TopLevelMixin
    sentences: tuple[str, str]