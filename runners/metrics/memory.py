"""The memory split of one point into the budget's parts (docs/design.md §2), from measured totals; an
endpoint's point, whose model runs in another process, gets its GPUs' memory in use from the samples."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def split(*, capacity: int, weights: int, kv_allocated: int, kv_used: int, peak_allocated: int | None,
          reserved: int | None, device_used: int | None) -> dict[str, int | None]:
    """Weights and KV are known; activations/workspace, allocator reserve and the rest are remainders.

    activations = peak allocated − weights − KV allocated; allocator reserve = reserved − peak allocated;
    other (CUDA context, other processes) = device used − reserved. Remainders never go below zero.
    """
    def rest(total: int | None, *parts: int | None) -> int | None:
        if total is None or any(p is None for p in parts):
            return None
        return max(0, total - sum(parts))

    return {
        "mem_capacity": capacity, "mem_weights": weights, "mem_kv_allocated": kv_allocated,
        "mem_kv_used": kv_used, "mem_activations": rest(peak_allocated, weights, kv_allocated),
        "mem_allocator_reserve": rest(reserved, peak_allocated), "mem_other": rest(device_used, reserved),
        "mem_peak_allocated": peak_allocated, "mem_reserved": reserved, "mem_nvml_used": device_used,
    }


def served(samples: Sequence[dict[str, Any]], point_index: int, capacity: int | None) -> dict[str, int | None]:
    """An endpoint point's memory: the server's GPUs, seen by NVML, have no split into parts (the model is
    not in this process), so the point keeps what the whole device holds: per GPU the most memory in use
    during the point's measured repeats, summed over the GPUs, and their capacity. Nothing when no sample
    holds GPU memory (a CPU run, a remote server, no sample inside a repeat)."""
    peaks: dict[Any, float] = {}
    for sample in samples:
        used, gpu = sample.get("mem_used_bytes"), sample.get("gpu_index")
        if sample["point_index"] == point_index and sample["repeat"] >= 0 and used is not None:
            peaks[gpu] = max(used, peaks.get(gpu, 0.0))
    if not peaks:
        return {}
    return {"mem_nvml_used": int(sum(peaks.values())), "mem_capacity": capacity}
