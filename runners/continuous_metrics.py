"""Continuous-batching metrics: request, step and repeat rows from one served workload, and the point's
summary over its repeats (the static summary's columns, plus queueing, goodput and KV occupancy)."""
from __future__ import annotations

import statistics
from typing import Any

from runners.spec.continuous import ContinuousPoint
from runners.engines.continuous import RunResult
from runners.metrics import percentile, repeat_rates
from runners.schemas import PERCENTILES


class ContinuousRepeat:
    """One repeat's rows; times in ms from the repeat's start."""

    def __init__(self, point_index: int, repeat: int, point: ContinuousPoint, result: RunResult,
                 slo_metric: str, slo_ms: float) -> None:
        base = {"point_index": point_index, "repeat": repeat, "batch_size": point.batch_size}
        self.result = result
        self.itl: list[float] = []
        self.requests = []
        met = 0
        for r in result.requests:
            ms = [t * 1e3 for t in r.token_s]
            gaps = [b - a for a, b in zip(ms, ms[1:])]
            self.itl.extend(gaps)
            arrival = r.arrival_s * 1e3
            row = {**base, "request_index": r.index, "prompt_len": r.prompt_len, "output_len": r.output_len,
                   "queue_ms": r.admit_s * 1e3 - arrival, "ttft_ms": ms[0] - arrival, "e2e_ms": ms[-1] - arrival,
                   "itl_ms_mean": statistics.fmean(gaps) if gaps else None, "itl_ms_p95": percentile(gaps, 95)}
            value = row["itl_ms_mean"] if slo_metric == "itl" else row[f"{slo_metric}_ms"]
            met += value is None or value <= slo_ms  # a one-token request has no gap to miss
            self.requests.append(row)
        self.steps = [{
            "point_index": point_index, "repeat": repeat, "step_index": k,
            "phase": "mixed" if s.prefill_tokens and s.decode_tokens else "prefill" if s.prefill_tokens else "decode",
            "start_ms": s.start_s * 1e3, "duration_ms": (s.end_s - s.start_s) * 1e3, "active_seqs": s.running,
            "active_tokens": s.kv_tokens, "batch_rows": s.rows, "prefill_tokens": s.prefill_tokens,
            "decode_tokens": s.decode_tokens,
        } for k, s in enumerate(result.steps)]
        wall_ms = result.steps[-1].end_s * 1e3
        prefill_ms = sum(s["duration_ms"] for s in self.steps if s["prefill_tokens"])
        out_tokens = sum(r.output_len for r in result.requests)
        in_tokens = sum(r.prompt_len for r in result.requests)
        wall_s = wall_ms / 1e3
        self.goodput_rps = met / wall_s
        self.row = {
            **base, "wall_ms": wall_ms, "prefill_ms": prefill_ms,
            "decode_ms": sum(s["duration_ms"] for s in self.steps if not s["prefill_tokens"]),
            "output_tokens": out_tokens, "input_tokens": in_tokens,
            "output_tokens_per_s": out_tokens / wall_s, "input_tokens_per_s": in_tokens / wall_s,
            "requests_per_s": len(result.requests) / wall_s,
        }


def summarise(point_index: int, point: ContinuousPoint, repeats: list[ContinuousRepeat], warmup: int,
              kv_capacity: int, slo_metric: str, slo_ms: float, timing: str) -> dict[str, Any]:
    """The point's summary row; prefill_ms is the median step time of steps that carried prefill."""
    requests = [r for rep in repeats for r in rep.requests]
    steps = [s for rep in repeats for s in rep.steps]
    decode = [s for s in steps if s["phase"] == "decode"]
    with_prefill = [s["duration_ms"] for s in steps if s["prefill_tokens"]]
    step_ms = [s["duration_ms"] for s in decode]
    rows_run = sum(s["batch_rows"] for s in steps)
    occupancy = [s["active_tokens"] / kv_capacity for s in steps]
    row: dict[str, Any] = {
        "point_index": point_index, "batch_size": point.batch_size, "status": "ok", "error": None,
        "repeats": len(repeats), "warmup": warmup,
        "prompt_len_mean": statistics.fmean(r["prompt_len"] for r in requests),
        "output_len_mean": statistics.fmean(r["output_len"] for r in requests),
        "prefill_ms": percentile(with_prefill, 50),
        "decode_step_ms": percentile(step_ms, 50), "decode_step_ms_p95": percentile(step_ms, 95),
        **repeat_rates([rep.row for rep in repeats]),
        "prefill_padding_waste": 0.0,  # one request per prefill: nothing is padded
        "decode_padding_waste": 1.0 - sum(s["decode_tokens"] for s in steps) / rows_run if rows_run else 0.0,
        "active_seqs_mean": statistics.fmean(s["active_seqs"] for s in steps),
        "active_tokens_mean": statistics.fmean(s["active_tokens"] for s in steps),
        "active_tokens_max": max(s["active_tokens"] for s in steps),
        "timing": timing,
        "sweep_axis": point.axis, "sweep_value": point.value, "max_num_seqs": point.max_num_seqs,
        "arrival_rate": point.arrival_rate, "concurrency": point.concurrency,
        "goodput_rps": statistics.median(rep.goodput_rps for rep in repeats),
        "goodput_slo": f"{slo_metric}<={slo_ms:g}ms", "kv_capacity_tokens": kv_capacity,
        "kv_occupancy_mean": statistics.fmean(occupancy), "kv_occupancy_max": max(occupancy),
        "admission_waits": sum(rep.result.admission_waits for rep in repeats),
    }
    itl = [x for rep in repeats for x in rep.itl]
    for p in PERCENTILES:
        for metric in ("ttft", "e2e", "queue"):
            row[f"{metric}_ms_p{p}"] = percentile([r[f"{metric}_ms"] for r in requests], p)
        row[f"itl_ms_p{p}"] = percentile(itl, p)
    return row
