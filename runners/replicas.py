"""Replicated serving: a batch of B requests split over K independent engines that run at once.

Each replica serves B/K requests (the first B mod K one more). Read back as one repeat: every
request keeps its own latencies (so percentiles are over all requests), throughput is the sum of the
replicas' rates, and the repeat's wall time is the slowest replica's.
"""
from __future__ import annotations

from typing import Any

from runners.engines.base import Batch, Generation
from runners.metrics import RepeatResult


def split_sizes(total: int, replicas: int) -> list[int]:
    base, extra = divmod(total, replicas)
    return [base + (1 if r < extra else 0) for r in range(replicas)]


def split(batch: Batch, replicas: int) -> list[Batch]:
    """Consecutive slices of the batch, one per replica, in request order."""
    parts, start = [], 0
    for size in split_sizes(batch.size, replicas):
        parts.append(Batch(prompt_ids=batch.prompt_ids[start:start + size],
                           output_lens=batch.output_lens[start:start + size]))
        start += size
    return parts


def combine(parts: list[Batch], gens: list[Generation]) -> Generation:
    """One Generation for the whole batch: token k is ready when every replica has produced it (a
    replica already done counts at its last token); the replicas' own results ride in `extra`."""
    longest = max(len(g.token_ms) for g in gens)
    token_ms = [max(g.token_ms[min(k, len(g.token_ms) - 1)] for g in gens) for k in range(longest)]
    return Generation(token_ms=token_ms, tokens=[row for g in gens for row in g.tokens], timing=gens[0].timing,
                      kv_allocated_bytes=gens[0].kv_allocated_bytes, extra={"replicas": list(zip(parts, gens))})


def repeat_result(point_index: int, repeat: int, batch: Batch, gen: Generation) -> RepeatResult | ReplicatedRepeat:
    if "replicas" in gen.extra:
        return ReplicatedRepeat(point_index, repeat, batch, gen.extra["replicas"])
    return RepeatResult(point_index, repeat, batch, gen)


class ReplicatedRepeat:
    """A RepeatResult's fields for a batch served by several replicas.

    `batch` and `gen` are replica 0's (the driver's own device), which the memory split reads;
    requests and steps carry their `replica`, request indices run over the whole batch.
    """

    def __init__(self, point_index: int, repeat: int, batch: Batch, served: list[tuple[Batch, Generation]]) -> None:
        parts = [RepeatResult(point_index, repeat, b, g) for b, g in served]
        self.batch, self.gen = parts[0].batch, parts[0].gen
        self.requests: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.itl: list[float] = []
        offset = 0
        for replica, part in enumerate(parts):
            self.requests += [{**r, "request_index": offset + r["request_index"], "batch_size": batch.size,
                               "replica": replica} for r in part.requests]
            self.steps += [{**s, "replica": replica} for s in part.steps]
            self.itl += part.itl
            offset += part.batch.size
        rows = [p.row for p in parts]
        wall, prefill = max(r["wall_ms"] for r in rows), max(r["prefill_ms"] for r in rows)
        self.row = {
            "point_index": point_index, "repeat": repeat, "batch_size": batch.size, "wall_ms": wall,
            "prefill_ms": prefill, "decode_ms": wall - prefill,
            **{key: sum(r[key] for r in rows) for key in ("output_tokens", "input_tokens", "output_tokens_per_s",
                                                           "input_tokens_per_s", "requests_per_s")},
        }
        self.waste = _waste([p.batch for p in parts])


def _waste(parts: list[Batch]) -> tuple[float, float]:
    """Padding waste over the slots every replica ran (each pads to its own longest request)."""
    prefill_slots = sum(b.size * max(b.prompt_lens) for b in parts)
    decode_slots = sum(b.size * (max(b.output_lens) - 1) for b in parts)
    prefill = 1.0 - sum(sum(b.prompt_lens) for b in parts) / prefill_slots
    decode = 1.0 - sum(o - 1 for b in parts for o in b.output_lens) / decode_slots if decode_slots else 0.0
    return prefill, decode
