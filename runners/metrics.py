"""Static-batch metrics from one timed batch, and a point's summary over its repeats (DESIGN §2)."""
from __future__ import annotations

import statistics
from typing import Any

from runners.engines.base import Batch, Generation
from runners.schemas import PERCENTILES


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def padding_waste(batch: Batch) -> tuple[float, float]:
    """Share of prefill slots that are padding, and of decode slots held by rows already finished."""
    prompts, outputs = batch.prompt_lens, batch.output_lens
    prefill = 1.0 - sum(prompts) / (batch.size * max(prompts))
    steps = max(outputs) - 1
    decode = 1.0 - sum(o - 1 for o in outputs) / (batch.size * steps) if steps > 0 else 0.0
    return prefill, decode


class RepeatResult:
    """One timed batch turned into request, step and repeat rows."""

    def __init__(self, point_index: int, repeat: int, batch: Batch, gen: Generation) -> None:
        self.batch, self.gen = batch, gen
        self.waste = padding_waste(batch)
        t = gen.token_ms
        if len(t) < max(batch.output_lens):
            raise RuntimeError(f"engine returned {len(t)} token times for {max(batch.output_lens)} tokens")
        base = {"point_index": point_index, "repeat": repeat, "batch_size": batch.size}
        self.step_ms = [t[k] - t[k - 1] for k in range(1, len(t))]
        self.requests = []
        self.itl: list[float] = []
        for i, (p, o) in enumerate(zip(batch.prompt_lens, batch.output_lens)):
            gaps = self.step_ms[: o - 1]
            self.itl.extend(gaps)
            self.requests.append({
                **base, "request_index": i, "prompt_len": p, "output_len": o, "queue_ms": 0.0,
                "ttft_ms": t[0], "e2e_ms": t[o - 1],
                "itl_ms_mean": statistics.fmean(gaps) if gaps else None,
                "itl_ms_p95": percentile(gaps, 95),
            })
        self.steps = [{
            "point_index": point_index, "repeat": repeat, "step_index": 0, "phase": "prefill",
            "start_ms": 0.0, "duration_ms": t[0], "active_seqs": batch.size,
            "active_tokens": sum(batch.prompt_lens), "batch_rows": batch.size,
        }]
        for k, duration in enumerate(self.step_ms, start=1):
            active = [(p, o) for p, o in zip(batch.prompt_lens, batch.output_lens) if o > k]
            self.steps.append({
                "point_index": point_index, "repeat": repeat, "step_index": k, "phase": "decode",
                "start_ms": t[k - 1], "duration_ms": duration, "active_seqs": len(active),
                "active_tokens": sum(p + k for p, _ in active), "batch_rows": batch.size,
            })
        wall_s = t[-1] / 1000.0
        out_tokens, in_tokens = sum(batch.output_lens), sum(batch.prompt_lens)
        self.row = {
            **base, "wall_ms": t[-1], "prefill_ms": t[0], "decode_ms": t[-1] - t[0],
            "output_tokens": out_tokens, "input_tokens": in_tokens,
            "output_tokens_per_s": out_tokens / wall_s, "input_tokens_per_s": in_tokens / wall_s,
            "requests_per_s": batch.size / wall_s,
        }


def repeat_rates(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Rates over a point's repeats: medians, plus the output rate's min–max spread the knee rule reads."""
    tput = [r["output_tokens_per_s"] for r in rows]
    return {
        "output_tokens_per_s": statistics.median(tput), "output_tokens_per_s_min": min(tput),
        "output_tokens_per_s_max": max(tput),
        "input_tokens_per_s": statistics.median(r["input_tokens_per_s"] for r in rows),
        "prefill_tokens_per_s": statistics.median(r["input_tokens"] / r["prefill_ms"] * 1000.0 for r in rows),
        "requests_per_s": statistics.median(r["requests_per_s"] for r in rows),
    }


def summarise(point_index: int, batch_size: int, repeats: list[RepeatResult], warmup: int) -> dict[str, Any]:
    """The point's summary row: medians and spreads over repeats, percentiles over every request."""
    requests = [r for rep in repeats for r in rep.requests]
    decode_steps = [s for rep in repeats for s in rep.steps if s["phase"] == "decode"]
    step_ms = [s["duration_ms"] for s in decode_steps]
    waste = [rep.waste for rep in repeats]
    row: dict[str, Any] = {
        "point_index": point_index, "batch_size": batch_size, "status": "ok", "error": None,
        "repeats": len(repeats), "warmup": warmup,
        "prompt_len_mean": statistics.fmean(r["prompt_len"] for r in requests),
        "output_len_mean": statistics.fmean(r["output_len"] for r in requests),
        "prefill_ms": statistics.median(rep.row["prefill_ms"] for rep in repeats),
        "decode_step_ms": percentile(step_ms, 50), "decode_step_ms_p95": percentile(step_ms, 95),
        **repeat_rates([rep.row for rep in repeats]),
        "prefill_padding_waste": statistics.fmean(w[0] for w in waste),
        "decode_padding_waste": statistics.fmean(w[1] for w in waste),
        "active_seqs_mean": statistics.fmean(s["active_seqs"] for s in decode_steps) if decode_steps else None,
        "active_tokens_mean": statistics.fmean(s["active_tokens"] for s in decode_steps) if decode_steps else None,
        "active_tokens_max": max((s["active_tokens"] for s in decode_steps), default=None),
        "timing": repeats[0].gen.timing,
        **_comm(repeats),
    }
    itl = [x for rep in repeats for x in rep.itl]
    for p in PERCENTILES:
        row[f"ttft_ms_p{p}"] = percentile([r["ttft_ms"] for r in requests], p)
        row[f"e2e_ms_p{p}"] = percentile([r["e2e_ms"] for r in requests], p)
        row[f"itl_ms_p{p}"] = percentile(itl, p)
    return row


def _comm(repeats: list[RepeatResult]) -> dict[str, Any]:
    """Tensor-parallel all-reduce time per decode step and its share of the step: medians over repeats."""
    extras = [rep.gen.extra for rep in repeats if rep.gen.extra.get("comm_ms_per_step") is not None]
    shares = [e["comm_share"] for e in extras if e["comm_share"] is not None]
    return {"comm_ms_per_step": statistics.median(e["comm_ms_per_step"] for e in extras) if extras else None,
            "comm_share": statistics.median(shares) if shares else None,
            "comm_source": extras[0]["comm_source"] if extras else None}
