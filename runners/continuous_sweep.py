"""One continuous-batching point of a sweep: set up the slot cache, serve the seeded workload
(warm-up repeats, then measured ones), and write the point's files like a static point."""
from __future__ import annotations

import time
from typing import Any

import torch

from runners import cancel, fingerprint, memory
from runners.continuous_metrics import ContinuousRepeat, summarise
from runners.continuous_spec import ContinuousPoint, longest_request
from runners.engines.continuous import ContinuousEngine
from runners.models import LoadedModel
from runners.schemas import SUMMARY
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
    summary: dict[str, Any] = {}
    setup_s = 0.0
    try:
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
        summary = summarise(index, point, repeats, spec.warmup, capacity, spec.slo_metric, spec.slo_ms,
                            "perf_counter")
        summary.update(_memory(sweep, loaded, served, repeats, rss_before))
    except (torch.OutOfMemoryError, MemoryError) as err:
        summary = sweep._failed(index, size, "oom", err)
    except cancel.Cancelled:
        sweep.sampler.drain()
        raise
    except RuntimeError as err:
        summary = sweep._failed(index, size, "oom" if "out of memory" in str(err).lower() else "error", err)
    finally:
        if summary.get("status") != "ok":
            repeats = []
        served.release()
        sweep._free()
    summary["setup_ms"] = setup_s * 1000.0
    summary.update(sweep_axis=point.axis, sweep_value=point.value, max_num_seqs=point.max_num_seqs,
                   arrival_rate=point.arrival_rate, concurrency=point.concurrency)
    from runners.sweep import _utilisation  # a sibling of Sweep; imported late to avoid a cycle

    samples = sweep._tag_samples(sweep.sampler.drain(), windows)
    summary.update(_utilisation(samples, summary, windows))
    tokens = spec.num_requests * len(repeats)
    if summary.get("energy_j") is not None and tokens:
        summary["energy_per_output_token_j"] = summary["energy_j"] / (summary["output_len_mean"] * tokens)
    for row in samples:
        del row["stage"]
    parts = {"samples": samples}
    if repeats:
        parts.update(requests=[r for rep in repeats for r in rep.requests],
                     steps=[s for rep in repeats for s in rep.steps], repeats=[rep.row for rep in repeats])
    sweep.folder.write_point(index, parts, {name: summary.get(name) for name in SUMMARY.names})
    sweep.folder.log(f"point {index} {point.axis} {point.value:g}: {summary['status']}"
                     + (f" {summary['output_tokens_per_s']:.1f} out tok/s, goodput {summary['goodput_rps']:.2f} "
                        f"req/s, {summary['admission_waits']} admission waits" if summary["status"] == "ok"
                        else f" {summary['error']}"))
    return summary


def _memory(sweep, loaded: LoadedModel, served: ContinuousEngine, repeats: list[ContinuousRepeat],
            rss_before: int) -> dict[str, Any]:
    """The static split with the slot cache as KV allocated and the most KV ever held as KV used."""
    info, device = loaded.info, sweep.device
    kv_used = max(s["active_tokens"] for rep in repeats for s in rep.steps) * info.kv_bytes_per_token
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return memory.split(capacity=total, weights=info.weight_bytes, kv_allocated=served.kv_bytes,
                            kv_used=kv_used, peak_allocated=torch.cuda.max_memory_allocated(device),
                            reserved=torch.cuda.max_memory_reserved(device), device_used=total - free)
    rss_peak = sweep.sampler.peak_rss()
    return memory.split(capacity=fingerprint.total_ram(), weights=info.weight_bytes,
                        kv_allocated=served.kv_bytes, kv_used=kv_used,
                        peak_allocated=info.weight_bytes + max(0, rss_peak - rss_before),  # RSS growth holds KV too
                        reserved=None, device_used=None)
