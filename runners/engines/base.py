"""The one small interface every engine implements, so a new engine plugs in without touching the sweep."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Batch:
    """A static batch: B requests with their own prompt and forced output lengths."""

    prompt_ids: list[list[int]]
    output_lens: list[int]

    @property
    def size(self) -> int:
        return len(self.prompt_ids)

    @property
    def prompt_lens(self) -> list[int]:
        return [len(p) for p in self.prompt_ids]


@dataclass
class Generation:
    """What one batch run produced, timed on the device.

    `token_ms[k]` is when output token k (for every still-running row) was ready, measured from the
    start of the batch; token 0 comes out of prefill, so `token_ms[0]` is the prefill time.
    `tokens[i]` are row i's generated ids (length = max output length of the batch).
    """

    token_ms: list[float]
    tokens: list[list[int]]
    timing: str  # "cuda_events" or "perf_counter"
    kv_allocated_bytes: int = 0
    extra: dict = field(default_factory=dict)


class Engine(Protocol):
    """Runs static batches of one model. Implementations: hf-generate, fast."""

    name: str

    def version(self) -> str:
        """Engine name and the library versions that define its behaviour."""
        ...

    def facts(self) -> dict[str, Any]:
        """ModelInfo fields this engine changes (quantised weight bytes, a shard's sizes), for the
        sweep to write into model.json; {} when it runs the model as loaded."""
        ...

    def setup(self, batch_size: int, max_prompt_len: int, max_output_len: int) -> float:
        """One-time setup for a batch shape (allocation, graph capture); returns its seconds."""
        ...

    def generate(self, batch: Batch) -> Generation:
        """Prefill the batch, decode until every row has its forced output length."""
        ...

    def release(self) -> None:
        """Free per-shape buffers (after an OOM or before the next shape)."""
        ...

