"""Explain step 4, memory: fixed weights and a growing KV cache, then capacity, headroom and the OOM point
projected from how much the whole footprint grew per request. An endpoint's model runs in its server, so its
points have no split: the step reads the server's GPUs whole, as NVML counts them."""
from __future__ import annotations

import math

import pandas as pd

from batchscope.analysis.marker import pct
from batchscope.explain.words import measured
from batchscope.units import size

FAR_BATCHES = 100  # a capacity line this many times the largest batch away is "far"
FLAT = 0.01  # a device count that moves less than this share across the sweep is "the same at every load"
KV_MEASURES = (("mem_kv_allocated", "allocated (what the cache reserves)"),
               ("mem_kv_used", "used (what live tokens fill)"))
SPLIT_GROWTH = (("kv", "KV cache"), ("activations", "activations"), ("allocator_reserve", "allocator reserve"))


def kv_measure(table: pd.DataFrame) -> tuple[str, str] | None:
    """The one KV column both memory sentences read: allocated when recorded, else used; with its meaning."""
    for column, meaning in KV_MEASURES:
        if not measured(table, column).empty:
            return column, meaning
    return None


def is_served(split: pd.DataFrame) -> bool:
    """Whether the split holds only a device count (an endpoint's server, seen by NVML), no part of its own."""
    parts = set(split["part"].astype(str)) if "part" in split and not split.empty else set()
    return parts == {"nvml_used"}


def memory_title(split: pd.DataFrame) -> str:
    if is_served(split):
        return "Memory: the server's GPU, counted whole"
    return "Memory: fixed weights; KV cache and activations grow with the batch"


def memory_sentences(table: pd.DataFrame, split: pd.DataFrame) -> tuple[str, str]:
    """Weights fixed and the KV cache growing (one KV measure, named), or a server's GPU counted whole; then
    capacity, headroom and the OOM point, projected from how much the whole footprint grew per request."""
    weights = measured(table, "mem_weights")
    kv = kv_measure(table)
    if is_served(split):
        first = served_sentence(measured(table, "mem_nvml_used"))
    elif weights.empty and kv is None:
        first = "This run recorded no memory split (weights, KV cache), so where its memory goes is unknown."
    else:
        held = (f"The weights take {size(weights['mem_weights'].max())} at every batch size" if not weights.empty
                else "This run recorded no weight bytes")
        if kv is None:
            first = f"{held}; the KV cache was not recorded."
        else:
            column, meaning = kv
            rows = measured(table, column)
            a, z = rows.iloc[0], rows.iloc[-1]
            per = f", {size(float(z[column]) / int(z['batch_size']))} per request"
            if len(rows) == 1:
                first = (f"{held}; the KV cache {meaning} is {size(a[column])} at batch {int(a['batch_size'])}{per}, "
                         f"the only finished batch.")
            else:
                first = (f"{held}, while the KV cache {meaning} grows with the batch: {size(a[column])} at batch "
                         f"{int(a['batch_size'])}, {size(z[column])} at batch {int(z['batch_size'])}{per}.")
    return first, capacity_sentence(table, split)


def served_sentence(rows: pd.DataFrame) -> str:
    """What NVML counted on the server's GPUs, first and last finished point; flat when it barely moved."""
    a, z = rows.iloc[0], rows.iloc[-1]
    head = ("The model runs in the server, not in this process, so its memory has no split into weights and KV "
            "cache; NVML counts the whole device's memory in use")
    low, high = float(rows["mem_nvml_used"].min()), float(rows["mem_nvml_used"].max())
    if len(rows) == 1:
        return f"{head}: {size(a['mem_nvml_used'])} at batch {int(a['batch_size'])}, the only finished batch."
    if high - low <= FLAT * high:
        return (f"{head}: {size(high)} at every batch from {int(a['batch_size'])} to {int(z['batch_size'])}, the "
                f"same whatever the load, so the server holds its memory up front rather than per request.")
    return (f"{head}: {size(a['mem_nvml_used'])} at batch {int(a['batch_size'])}, {size(z['mem_nvml_used'])} at "
            f"batch {int(z['batch_size'])}.")


def capacity_sentence(table: pd.DataFrame, split: pd.DataFrame) -> str:
    """How much of the device the largest ok batch used, and the OOM point or where the measured growth of the
    whole footprint (KV, activations, allocator reserve) per request would fill it."""
    ok_split = split[split["status"] == "ok"] if "status" in split else split
    used = ok_split.dropna(subset=["bytes"]).groupby("batch_size")["bytes"].sum()
    used = used[used > 0]
    capacity = measured(table, "mem_capacity")["mem_capacity"].max() if "mem_capacity" in table else math.nan
    ooms = sorted(int(b) for b in table.loc[table["status"] == "oom", "batch_size"]) if "status" in table else []
    if used.empty:
        oom_words = f"Batch {ooms[0]} ran out of memory, but" if ooms else "There is"
        return f"{oom_words} no memory measurement of a finished batch to set against the device's capacity."
    bl, ul = int(used.index.max()), float(used.iloc[-1])
    if math.isnan(capacity):
        of = f"{size(ul)} (the device capacity was not recorded)"
    else:
        share = pct(ul / capacity) if ul >= capacity / 100 else "under 1 %"
        of = f"{size(ul)} of the {size(capacity)} on the device ({share})"
    head = (f"Batch {ooms[0]} ran out of memory; the largest batch that fit, {bl}, used {of}" if ooms
            else f"No batch ran out of memory; the largest, {bl}, used {of}")
    growth = None if is_served(split) else footprint_growth(ok_split)  # a server's memory is not per request
    if growth is None:
        return head + "."
    per_row, low, parts = growth
    named = ", ".join(f"{name} {size(parts[key])}" for key, name in SPLIT_GROWTH if key in parts)
    grew = f"from batch {low} to {bl} the whole footprint grew {size(per_row)} per request" + (
        f" ({named})" if named else "")
    if math.isnan(capacity) or per_row <= 0:
        return f"{head}; {grew}."
    reach = bl + max(0.0, capacity - ul) / per_row
    if reach > FAR_BATCHES * bl:
        return f"{head}; {grew}, so the capacity line is far away (near batch {reach:.0f})."
    if not ooms:
        return f"{head}; {grew}, so at that rate the device fills near batch {reach:.0f}."
    if reach < ooms[0]:
        return f"{head}; {grew}, so at that rate it was full near batch {reach:.0f}."
    return (f"{head}; {grew}, which alone would fill it only near batch {reach:.0f}, so batch {ooms[0]} needed more "
            f"than that growth predicts.")


def footprint_growth(ok_split: pd.DataFrame) -> tuple[float, int, dict[str, float]] | None:
    """Bytes per added request between the two largest finished batches: the whole footprint, its first batch,
    and the growth of those of KV (used + unused), activations and allocator reserve the split holds; None
    with fewer than two."""
    wide = ok_split.dropna(subset=["bytes"]).pivot_table(index="batch_size", columns="part", values="bytes",
                                                          aggfunc="sum", observed=True)
    wide = wide[wide.sum(axis=1) > 0].sort_index()
    if len(wide) < 2:
        return None
    low, high = wide.iloc[-2], wide.iloc[-1]
    rows = float(wide.index[-1] - wide.index[-2])
    grown = (high - low).fillna(0.0) / rows
    kv = [grown[key] for key in ("kv_used", "kv_unused") if key in grown]
    parts = {"kv": float(sum(kv))} if kv else {}
    parts.update({key: float(grown[key]) for key in ("activations", "allocator_reserve") if key in grown})
    return float(grown.sum()), int(wide.index[-2]), parts