"""The sweep modes the spec knows, and the one place that says which points a spec plans.

Each mode's spec module (static, continuous, endpoint) gives `points(spec)` and `check(spec, values, found,
context)`; its runner side is the module of the same name in runners.modes. Torch-free: the app counts
and names planned points from here.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from runners.spec import continuous, endpoint, static
from runners.spec.registry import MODES
from runners.spec.sweep import SweepSpec


class Point(Protocol):
    """One configuration of a sweep, whatever the mode."""

    larger: str  # what an OOM stop leaves out: "larger batches", "larger values"
    axis: str  # the field refinement varies (runners.spec.refine.at)
    added_for: str | None  # why refinement added it; None for a planned point

    @property
    def batch_size(self) -> int: ...

    @property
    def label(self) -> str:
        """How a log line or a note names it: "batch 8", "max_num_seqs 64"."""
        ...


class ModeSpec(Protocol):
    def points(self, spec: SweepSpec) -> Sequence[Point]: ...

    def check(self, spec: SweepSpec, values: dict[str, Any], found: dict[str, str], context: int | None) -> None: ...


MODE_SPECS: dict[str, ModeSpec] = dict(zip(MODES, (static, continuous, endpoint), strict=True))


def points(spec: SweepSpec) -> Sequence[Point]:
    """The planned points of any sweep, in the order they run."""
    return MODE_SPECS[spec.mode].points(spec)


def point_count(spec: SweepSpec) -> int:
    return len(points(spec))
