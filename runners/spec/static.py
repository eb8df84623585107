"""Static batching in the spec: a point per batch size, and the context every drawn batch must fit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runners.spec.options import record
from runners.spec.sweep import SweepSpec, check_context, check_draws, lengths_fit


@dataclass(frozen=True)
class StaticPoint:
    """One batch size of a static sweep."""

    batch_size: int
    added_for: str | None = None  # why refinement added it (runners.spec.refine.REASONS); None when planned
    larger = "larger batches"  # what an OOM stop leaves out
    axis = "batch_size"  # the field refinement varies

    @property
    def label(self) -> str:
        return f"batch {self.batch_size}"


def points(spec: SweepSpec) -> list[StaticPoint]:
    return [StaticPoint(b) for b in spec.batch_sizes]


def check(spec: SweepSpec, values: dict[str, Any], found: dict[str, str], context: int | None) -> None:
    """The sweep draws a bounded number of requests, and each one's prompt + output must fit the model's
    context (drawn only when the lengths' maxima could pass it)."""
    record(found, "batch_sizes", lambda: check_draws(spec, sum(spec.batch_sizes), "batch_sizes"))
    if context and not {"prompt_len", "output_len", "batch_sizes"} & set(found) and not lengths_fit(spec, context):
        record(found, "prompt_len", lambda: check_context(max(spec.longest_request(b) for b in spec.batch_sizes),
                                                          context))
