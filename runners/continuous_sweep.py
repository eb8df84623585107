"""One continuous-batching point of a sweep: set up the slot cache, serve the seeded workload
(warm-up repeats, then measured ones), and write the point's files like a static point."""
from __future__ import annotations

import time
from typing import Any

import torch

from runners.continuous_metrics import ContinuousRepeat, summarise
from runners.spec.continuous import ContinuousPoint, longest_request
from runners.engines.continuous import ContinuousEngine
from runners.models import LoadedModel
from runners.telemetry import rss_bytes


def workload(spec, repeat: int, vocab: int) -> tuple[list[list[int]], list[int]]:
    """The repeat's requests: the same at every point, so points differ only in load and limits."""
    prompts, outputs = spec.request_lengths(spec.num_requests, repeat)
    gen = torch.Generator().manual_seed(spec.seed * 1_000_003 + repeat + 29)
    ids = torch.randint(1, vocab, (sum(prompts),), generator=gen).tolist()
    rows, start = [], 0
    for p in prompts:
        rows.append(ids[start:start + p])
        start += p
    return rows, outputs


def run_point(sweep, index: int, point: ContinuousPoint, loaded: LoadedModel, engine) -> dict[str, Any]:
    """Like Sweep._point for a static batch; `sweep` supplies the folder, sampler and stage helpers."""
    spec, device = sweep.spec, sweep.device
    size = point.batch_size
    work = {r: workload(spec, r, loaded.info.vocab) for r in spec.repeat_indices()}
    arrivals = (dict(rate=point.arrival_rate) if point.arrival_rate is not None
                else dict(concurrency=point.concurrency))
    sweep._reset_memory_stats()
    rss_before = rss_bytes()
    served = ContinuousEngine(engine.decoder, device, graphs=engine.graphs)
    repeats: list[ContinuousRepeat] = []
    windows: list[tuple[int, float, float, float]] = []
    setup_s = 0.0

    def measure() -> dict[str, Any]:
        nonlocal setup_s
        sweep._stage(index, size, "setup")
        setup_s = served.setup(point.max_num_seqs, longest_request(spec))
        capacity = spec.kv_cache_tokens or served.slots * served.max_len
        for repeat, (prompts, outputs) in work.items():
            sweep._stage(index, size, "warmup" if repeat < 0 else "measure", max(repeat, 0))
            host_start = time.perf_counter()
            result = served.run(prompts, outputs, {**arrivals, "seed": spec.seed * 7919 + repeat},
                                spec.max_num_batched_tokens, capacity)
            if repeat >= 0:
                repeats.append(ContinuousRepeat(index, repeat, point, result, spec.slo_metric, spec.slo_ms))
                # steps mix prefill and decode, so a measured repeat's samples are all tagged decode
                windows.append((repeat, host_start, host_start, host_start + result.steps[-1].end_s))
        return {**summarise(index, point, repeats, spec.warmup, capacity, spec.slo_metric, spec.slo_ms,
                            "perf_counter"),
                **_memory(sweep, loaded, served, repeats, rss_before)}

    summary = sweep._measure_point(index, size, measure, served.release)
    if summary["status"] != "ok":
        repeats = []
    summary["setup_ms"] = setup_s * 1000.0
    summary.update(sweep_axis=point.axis, sweep_value=point.value, max_num_seqs=point.max_num_seqs,
                   arrival_rate=point.arrival_rate, concurrency=point.concurrency)
    done = (f" {summary['output_tokens_per_s']:.1f} out tok/s, goodput {summary['goodput_rps']:.2f} req/s, "
            f"{summary['admission_waits']} admission waits") if summary.get("status") == "ok" else ""
    return sweep._write_point(index, summary, repeats, windows, f"{point.axis} {point.value:g}", done,
                              spec.num_requests)


def _memory(sweep, loaded: LoadedModel, served: ContinuousEngine, repeats: list[ContinuousRepeat],
            rss_before: int) -> dict[str, Any]:
    """The static split with the slot cache as KV allocated and the most KV ever held as KV used."""
    info = loaded.info
    kv_used = max(s["active_tokens"] for rep in repeats for s in rep.steps) * info.kv_bytes_per_token
    return sweep._split(info, served.kv_bytes, kv_used, rss_before)
