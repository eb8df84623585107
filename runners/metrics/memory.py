"""The memory split of one point into the budget's parts (docs/design.md §2), from measured totals."""
from __future__ import annotations


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
