"""Replicated serving: a batch of B requests split over K independent engines that run at once.

Each replica serves B/K requests (the first B mod K one more); their generations come back as one,
which runners.metrics.replicated reads as one repeat.
"""
from __future__ import annotations

from runners.engines.base import Batch, Generation


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
