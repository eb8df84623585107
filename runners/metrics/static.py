"""Static-batch metrics (docs/design.md §2): the rows of one timed batch, its padding waste, and the point's
summary over its repeats."""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runners.engines.base import Batch, Generation
from runners.metrics import summary
from runners.metrics.repeat import Repeat, repeat_row, request_row


@dataclass
class StaticRepeat(Repeat):
    batch: Batch  # replica 0's share when several replicas served it (the memory split reads it)
    gen: Generation
    waste: tuple[float, float]  # prefill and decode padding waste


def padding_waste(batch: Batch) -> tuple[float, float]:
    """Share of prefill slots that are padding, and of decode slots held by rows already finished."""
    prompts, outputs = batch.prompt_lens, batch.output_lens
    prefill = 1.0 - sum(prompts) / (batch.size * max(prompts))
    steps = max(outputs) - 1
    decode = 1.0 - sum(o - 1 for o in outputs) / (batch.size * steps) if steps > 0 else 0.0
    return prefill, decode


def static_repeat(point_index: int, repeat: int, batch: Batch, gen: Generation) -> StaticRepeat:
    """One timed batch as rows: token k of every still-running row is ready at gen.token_ms[k]."""
    t = gen.token_ms
    if len(t) < max(batch.output_lens):
        raise RuntimeError(f"engine returned {len(t)} token times for {max(batch.output_lens)} tokens")
    base = {"point_index": point_index, "repeat": repeat, "batch_size": batch.size}
    step_ms = [t[k] - t[k - 1] for k in range(1, len(t))]
    requests, itl = [], []
    for i, (p, o) in enumerate(zip(batch.prompt_lens, batch.output_lens)):
        gaps = step_ms[: o - 1]
        itl.extend(gaps)
        requests.append(request_row(base, i, p, o, 0.0, t[0], t[o - 1], gaps, arrival_ms=0.0, load=None))
    step = {"point_index": point_index, "repeat": repeat, "batch_rows": batch.size}
    steps = [{**step, "step_index": 0, "phase": "prefill", "start_ms": 0.0, "duration_ms": t[0],
              "active_seqs": batch.size, "active_tokens": sum(batch.prompt_lens),
              "prefill_tokens": batch.size * max(batch.prompt_lens), "decode_tokens": 0}]
    for k, duration in enumerate(step_ms, start=1):
        active = [p for p, o in zip(batch.prompt_lens, batch.output_lens) if o > k]
        steps.append({**step, "step_index": k, "phase": "decode", "start_ms": t[k - 1], "duration_ms": duration,
                      "active_seqs": len(active), "active_tokens": sum(p + k for p in active),
                      "prefill_tokens": 0, "decode_tokens": len(active)})
    row = repeat_row(base, t[-1], t[0], t[-1] - t[0], sum(batch.output_lens), sum(batch.prompt_lens), batch.size)
    return StaticRepeat(requests, steps, row, itl, batch, gen, padding_waste(batch))


def summarise(point_index: int, batch_size: int, repeats: Sequence[StaticRepeat], warmup: int) -> summary.Summary:
    """The base summary plus the prefill time of the batch, padding waste, the decode step and its active rows
    over every decode step (the batch is the load), and tensor-parallel communication."""
    out = summary.base(point_index, batch_size, repeats, warmup, repeats[0].gen.timing)
    decode_steps = [s for rep in repeats for s in rep.steps if s["phase"] == "decode"]
    out.update(prefill_ms=statistics.median(rep.row["prefill_ms"] for rep in repeats),
               prefill_padding_waste=statistics.fmean(rep.waste[0] for rep in repeats),
               decode_padding_waste=statistics.fmean(rep.waste[1] for rep in repeats),
               **summary.decode(decode_steps), **_comm(repeats))
    return out


def _comm(repeats: Sequence[StaticRepeat]) -> dict[str, Any]:
    """Tensor-parallel all-reduce time per decode step and its share of the step: medians over repeats."""
    extras = [rep.gen.extra for rep in repeats if rep.gen.extra.get("comm_ms_per_step") is not None]
    shares = [e["comm_share"] for e in extras if e["comm_share"] is not None]
    return {"comm_ms_per_step": statistics.median(e["comm_ms_per_step"] for e in extras) if extras else None,
            "comm_share": statistics.median(shares) if shares else None,
            "comm_source": extras[0]["comm_source"] if extras else None}
