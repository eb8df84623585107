"""Where the memory goes per point (measured), and what a sweep will need before it runs (predicted)."""
from __future__ import annotations

import pandas as pd

from batchscope.analysis.axis import sweep_x
from batchscope.analysis.marker import pct
from runners.engines.kv_layout import cache_len
from runners.spec import SweepSpec
from runners.spec.continuous import longest_request
from runners.spec.continuous import points as continuous_points
from runners.spec.registry import schedules_slots
from batchscope.units import GiB

TIGHT_FRACTION = 0.9  # above this share of capacity, activations and the CUDA context may still OOM

# The stacking order of the memory chart, bottom to top (docs/design.md §2, "Memory split"); last, a point
# that has no split (an endpoint's: its model runs in the server) draws its GPUs' whole memory in use instead.
SPLIT_PARTS = ("weights", "kv_used", "kv_unused", "activations", "allocator_reserve", "other", "nvml_used")


def memory_split(points: pd.DataFrame) -> pd.DataFrame:
    """Long table for the stacked memory chart: one row per point (keyed by its `x`, see
    `axis.sweep_x`) and part, with bytes and capacity.

    kv_unused = KV allocated − KV used. Parts a point does not report (the torch-allocator parts on
    CPU, everything on an OOM point) are left out rather than drawn as zero. A point with no part at all
    but a device count (an endpoint's, from NVML) has that count as its one part, `nvml_used`.
    """
    parts = pd.DataFrame({
        "weights": points["mem_weights"],
        "kv_used": points["mem_kv_used"],
        "kv_unused": points["mem_kv_allocated"] - points["mem_kv_used"],
        "activations": points["mem_activations"],
        "allocator_reserve": points["mem_allocator_reserve"],
        "other": points["mem_other"],
    })
    parts["nvml_used"] = points["mem_nvml_used"].where(parts.isna().all(axis=1))
    points = points.assign(x=sweep_x(points))
    keys = [c for c in ("run_id", "batch_size", "x", "status") if c in points.columns]
    wide = pd.concat([points[keys + ["mem_capacity"]].rename(columns={"mem_capacity": "capacity"}), parts], axis=1)
    long = wide.melt(id_vars=keys + ["capacity"], value_vars=list(SPLIT_PARTS), var_name="part", value_name="bytes")
    long = long.dropna(subset=["bytes"])
    long["part"] = pd.Categorical(long["part"], categories=SPLIT_PARTS, ordered=True)
    order = [c for c in ("run_id", "x") if c in keys] + ["part"]
    return long.sort_values(order).reset_index(drop=True)[keys + ["part", "bytes", "capacity"]]


def predict_memory(model: dict, batch_sizes: list[int], prompt_lens: list[int], output_lens: list[int],
                   capacity_bytes: int | None) -> pd.DataFrame:
    """Weights + static-batch KV per batch size, whether it fits, and a message for the New sweep page.

    Batch B is taken to hold the first B of the given lengths (pass at least max(batch_sizes) of them
    in draw order); its KV is B × (max prompt + max output) × KV bytes/token, because a static batch
    pads every row to the longest prompt and keeps it until the longest output is done.
    """
    return _static(model, [(b, max(prompt_lens[:b]), max(output_lens[:b])) for b in batch_sizes], capacity_bytes)


def predict_memory_for_spec(model: dict, spec: SweepSpec, capacity_bytes: int | None) -> pd.DataFrame:
    """`predict_memory` with the exact lengths the runner will draw, warm-up included.

    Static: each batch size draws its own lengths per repeat (`SweepSpec.request_lengths`); the
    largest batch of all repeats is the one that must fit. Continuous: per max_num_seqs, the slot
    cache the engine allocates up front, whatever the load: slots × the longest request of the
    workload, rounded up to the cache alignment (`runners.engines.kv_layout`).
    """
    if schedules_slots(spec.mode):
        per_slot = cache_len(longest_request(spec))
        limits = sorted({point.max_num_seqs for point in continuous_points(spec)})
        return _prediction(model, [(m, per_slot) for m in limits], capacity_bytes, "max_num_seqs")
    shapes = []
    for b in spec.batch_sizes:
        drawn = [spec.request_lengths(b, r) for r in spec.repeat_indices()]
        shapes.append((b, max(max(p) for p, _ in drawn), max(max(o) for _, o in drawn)))
    return _static(model, shapes, capacity_bytes)


def _static(model: dict, shapes: list[tuple[int, int, int]], capacity_bytes: int | None) -> pd.DataFrame:
    """(batch, longest prompt, longest output) shapes → the prediction, with both lengths kept."""
    table = _prediction(model, [(b, p + o) for b, p, o in shapes], capacity_bytes, "batch")
    table.insert(1, "max_prompt_len", [p for _, p, _ in shapes])
    table.insert(2, "max_output_len", [o for _, _, o in shapes])
    return table


def _prediction(model: dict, shapes: list[tuple[int, int]], capacity_bytes: int | None, noun: str) -> pd.DataFrame:
    """(rows, KV tokens per row) shapes → weights + KV bytes, whether they fit, and a message."""
    rows = []
    for batch, tokens_per_row in shapes:
        kv = batch * tokens_per_row * model["kv_bytes_per_token"]
        total = model["weight_bytes"] + kv
        fits = None if capacity_bytes is None else total <= capacity_bytes
        rows.append({"batch_size": batch, "tokens_per_row": tokens_per_row, "weight_bytes": model["weight_bytes"],
                     "kv_bytes": kv, "total_bytes": total, "capacity_bytes": capacity_bytes, "fits": fits,
                     "message": _message(f"{noun} {batch}", total, capacity_bytes)})
    table = pd.DataFrame(rows)
    table["fits"] = table["fits"].astype("boolean")
    return table


def _message(what: str, total: int, capacity: int | None) -> str:
    need = f"{what} needs {total / GiB:.1f} GiB for weights + KV"
    if capacity is None:
        return f"{need[0].upper()}{need[1:]}; device capacity unknown."
    share = total / capacity
    if share > 1:
        return f"Will not fit: {need}, more than the {capacity / GiB:.1f} GiB on the device."
    if share > TIGHT_FRACTION:
        return (f"Tight: {need}, {pct(share)} of {capacity / GiB:.1f} GiB; activations and the CUDA context "
                f"may push it out of memory.")
    return f"Fits: {need}, {pct(share)} of {capacity / GiB:.1f} GiB."
