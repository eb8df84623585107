"""The one interface Sweep calls, whatever the mode: run a planned point and return its summary.

A mode is a spec module (runners.spec.<mode>: its checks and `points`) and a module here of the same
name whose `run_point` measures one of those points through the PointContext and writes it.
"""
from __future__ import annotations

from typing import Any, Protocol

from runners.metrics.summary import Summary
from runners.modes.context import PointContext


class Mode(Protocol):
    def run_point(self, ctx: PointContext, index: int, point: Any) -> Summary:
        """Set up, warm up, measure and write point `index` (one of runners.spec.points(spec), of this
        mode's point type); an OOM or error is the summary's status, a cancel raises."""
        ...
