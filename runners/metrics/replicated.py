"""A static batch served by several replicas (runners.engines.replicas), read back as one repeat: every request
keeps its own latencies (so percentiles are over all requests), throughput is the sum of the replicas'
rates, and the repeat's wall and prefill times are the slowest replica's."""
from __future__ import annotations

from runners.engines.base import Batch, Generation
from runners.metrics.repeat import Row
from runners.metrics.static import StaticRepeat, static_repeat

SUMMED = ("output_tokens", "input_tokens", "output_tokens_per_s", "input_tokens_per_s", "requests_per_s")


def batch_repeat(point_index: int, repeat: int, batch: Batch, gen: Generation) -> StaticRepeat:
    """The repeat of one timed batch, replicated (runners.engines.replicas.combine left the replicas' own
    results in `gen.extra`) or not."""
    if "replicas" in gen.extra:
        return replicated_repeat(point_index, repeat, batch, gen.extra["replicas"])
    return static_repeat(point_index, repeat, batch, gen)


def replicated_repeat(point_index: int, repeat: int, batch: Batch,
                      served: list[tuple[Batch, Generation]]) -> StaticRepeat:
    """`batch` and `gen` of the result are replica 0's (the driver's own device, which the memory split
    reads); requests and steps carry their `replica`, request indices run over the whole batch."""
    parts = [static_repeat(point_index, repeat, b, g) for b, g in served]
    requests: list[Row] = []
    steps: list[Row] = []
    itl: list[float] = []
    offset = 0
    for replica, part in enumerate(parts):
        requests += [{**r, "request_index": offset + r["request_index"], "batch_size": batch.size,
                      "replica": replica} for r in part.requests]
        steps += [{**s, "replica": replica} for s in part.steps]
        itl += part.itl
        offset += part.batch.size
    rows = [p.row for p in parts]
    wall, prefill = max(r["wall_ms"] for r in rows), max(r["prefill_ms"] for r in rows)
    row = {"point_index": point_index, "repeat": repeat, "batch_size": batch.size, "wall_ms": wall,
           "prefill_ms": prefill, "decode_ms": wall - prefill, **{key: sum(r[key] for r in rows) for key in SUMMED}}
    return StaticRepeat(requests, steps, row, itl, parts[0].batch, parts[0].gen, _waste([p.batch for p in parts]))


def _waste(parts: list[Batch]) -> tuple[float, float]:
    """Padding waste over the slots every replica ran (each pads to its own longest request)."""
    prefill_slots = sum(b.size * max(b.prompt_lens) for b in parts)
    decode_slots = sum(b.size * (max(b.output_lens) - 1) for b in parts)
    prefill = 1.0 - sum(sum(b.prompt_lens) for b in parts) / prefill_slots
    decode = 1.0 - sum(o - 1 for b in parts for o in b.output_lens) / decode_slots if decode_slots else 0.0
    return prefill, decode
