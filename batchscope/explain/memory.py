"""Explain step 4, memory: fixed weights and a growing KV cache, then capacity, headroom and the OOM point
projected from how much the whole footprint grew per request."""
from __future__ import annotations

import math

import pandas as pd

from batchscope.analysis.marker import pct
from batchscope.explain.words import measured
from batchscope.units import size

FAR_BATCHES = 100  # a capacity line this many times the largest batch away is "far"
KV_MEASURES = (("mem_kv_allocated", "allocated (what the cache reserves)"),
               ("mem_kv_used", "used (what live tokens fill)"))
SPLIT_GROWTH = (("kv", "KV cache"), ("activations", "activations"), ("allocator_reserve", "allocator reserve"))


def kv_measure(table: pd.DataFrame) -> tuple[str, str] | None:
    """The one KV column both memory sentences read: allocated when recorded, else used; with its meaning."""
    for column, meaning in KV_MEASURES:
        if not measured(table, column).empty:
            return column, meaning
    return None


def memory_sentences(table: pd.DataFrame, split: pd.DataFrame) -> tuple[str, str]:
    """Weights fixed and the KV cache growing (one KV measure, named); then capacity, headroom and the OOM
    point, projected from how much the whole footprint grew per request."""
    weights = measured(table, "mem_weights")
    kv = kv_measure(table)
    if weights.empty and kv is None:
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
    growth = footprint_growth(ok_split)
    if growth is None:
        return head + "."
    per_row, low, parts = growth
    grew = (f"from batch {low} to {bl} the whole footprint grew {size(per_row)} per request ("
            + ", ".join(f"{name} {size(parts[key])}" for key, name in SPLIT_GROWTH if key in parts) + ")")
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
    and the growth of KV (used + unused), activations and allocator reserve; None with fewer than two."""
    wide = ok_split.dropna(subset=["bytes"]).pivot_table(index="batch_size", columns="part", values="bytes",
                                                          aggfunc="sum", observed=True)
    wide = wide[wide.sum(axis=1) > 0].sort_index()
    if len(wide) < 2:
        return None
    low, high = wide.iloc[-2], wide.iloc[-1]
    rows = float(wide.index[-1] - wide.index[-2])
    grown = (high - low).fillna(0.0) / rows
    parts = {"kv": float(grown.get("kv_used", 0.0) + grown.get("kv_unused", 0.0))}
    parts.update({key: float(grown[key]) for key in ("activations", "allocator_reserve") if key in grown})
    return float(grown.sum()), int(wide.index[-2]), parts