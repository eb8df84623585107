"""Continuous-batching metrics: request, step and repeat rows from one served workload, and the point's
summary over its repeats (the base summary, plus queueing, goodput and KV occupancy)."""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from runners.engines.continuous import RunResult
from runners.metrics import summary
from runners.metrics.loaded import from_row, loaded, step_counts
from runners.metrics.repeat import Repeat, repeat_row, request_row
from runners.metrics.stats import percentile
from runners.results.schemas import PERCENTILES


@dataclass
class ContinuousRepeat(Repeat):
    goodput_rps: float  # requests meeting the SLO ÷ wall time
    admission_waits: int  # steps in which the queue's head waited only for KV blocks
    preemptions: int  # requests preempted (and later recomputed) when the pool ran out


def continuous_repeat(point_index: int, repeat: int, batch_size: int, result: RunResult, slo_metric: str,
                      slo_ms: float) -> ContinuousRepeat:
    """One served workload as rows; times in ms from the repeat's start, latencies from each arrival."""
    base = {"point_index": point_index, "repeat": repeat, "batch_size": batch_size}
    requests, itl = [], []
    met = 0
    load = loaded([r.arrival_s * 1e3 for r in result.requests],
                  [[t * 1e3 for t in r.token_s] for r in result.requests])
    for r in result.requests:
        ms = [t * 1e3 for t in r.token_s]
        gaps = [b - a for a, b in zip(ms, ms[1:])]
        arrival = r.arrival_s * 1e3
        row = request_row(base, r.index, r.prompt_len, r.output_len, r.admit_s * 1e3 - arrival, ms[0] - arrival,
                          ms[-1] - arrival, gaps, arrival_ms=arrival, load=load)
        if row["latency_counted"]:
            itl.extend(gaps)
        value = row["itl_ms_mean"] if slo_metric == "itl" else row[f"{slo_metric}_ms"]
        met += value is None or value <= slo_ms  # a one-token request has no gap to miss
        requests.append(row)
    steps = [{
        "point_index": point_index, "repeat": repeat, "step_index": k,
        "phase": "mixed" if s.prefill_tokens and s.decode_tokens else "prefill" if s.prefill_tokens else "decode",
        "start_ms": s.start_s * 1e3, "duration_ms": (s.end_s - s.start_s) * 1e3, "active_seqs": s.running,
        "active_tokens": s.kv_tokens, "batch_rows": s.rows, "prefill_tokens": s.prefill_tokens,
        "decode_tokens": s.decode_tokens, "kv_blocks": s.kv_blocks, "preemptions": s.preemptions,
    } for k, s in enumerate(result.steps)]
    wall_ms = result.steps[-1].end_s * 1e3
    row = repeat_row(base, wall_ms, sum(s["duration_ms"] for s in steps if s["prefill_tokens"]),
                     sum(s["duration_ms"] for s in steps if not s["prefill_tokens"]),
                     sum(r.output_len for r in result.requests), sum(r.prompt_len for r in result.requests),
                     len(result.requests), load)
    return ContinuousRepeat(requests, steps, row, itl, met / (wall_ms / 1e3), result.admission_waits,
                            result.preemptions)


def summarise(point_index: int, batch_size: int, repeats: Sequence[ContinuousRepeat], warmup: int,
              pool_blocks: int, block_size: int, slo_metric: str, slo_ms: float) -> summary.Summary:
    """The base summary (latencies over the requests that count, loaded.counts); prefill_ms is the median
    time of steps that carried prefill; the decode step and its active rows are over the decode-only steps
    that ended in the load window (loaded.step_counts); KV occupancy (tokens held over the pool's tokens) is
    over all steps; the host's clock times every step (after a device sync)."""
    out = summary.base(point_index, batch_size, repeats, warmup, "perf_counter")
    counted = summary.counted(repeats)
    steps = [s for rep in repeats for s in rep.steps]
    loaded_decode = [s for rep in repeats for s in rep.steps
                     if s["phase"] == "decode" and step_counts(s, from_row(rep.row))]
    rows_run = sum(s["batch_rows"] for s in steps)
    kv_capacity = pool_blocks * block_size
    occupancy = [s["active_tokens"] / kv_capacity for s in steps]
    out.update(
        prefill_ms=percentile([s["duration_ms"] for s in steps if s["prefill_tokens"]], 50),
        prefill_padding_waste=0.0,  # one request per prefill: nothing is padded
        decode_padding_waste=1.0 - sum(s["decode_tokens"] for s in steps) / rows_run if rows_run else 0.0,
        **summary.decode(loaded_decode),
        goodput_rps=statistics.median(rep.goodput_rps for rep in repeats),
        goodput_slo=f"{slo_metric}<={slo_ms:g}ms", kv_capacity_tokens=kv_capacity,
        kv_occupancy_mean=statistics.fmean(occupancy), kv_occupancy_max=max(occupancy),
        admission_waits=sum(rep.admission_waits for rep in repeats),
        preemptions=sum(rep.preemptions for rep in repeats), kv_block_size=block_size,
        kv_blocks_total=pool_blocks, kv_blocks_peak=max(s["kv_blocks"] for s in steps),
        **{f"queue_ms_p{p}": percentile([r["queue_ms"] for r in counted], p) for p in PERCENTILES})
    return out
