"""Explain step 5, the roofline: the measured decode step against its floor, memory- or compute-bound,
and where the ridge lies."""
from __future__ import annotations

from typing import Any

import pandas as pd

from batchscope.analysis import Analysis
from batchscope.analysis.marker import num, pct
from batchscope.analysis.roofline import whole_cache_read_ms
from batchscope.explain.words import measured, roofline_share, value
from batchscope.units import ms, size
from runners.spec.registry import decode_reads_whole_cache, engine_release

WHOLE_CACHE_MATTERS = 1.25  # a whole-cache read this many times the floor is worth a sentence; below, it is noise


def roofline_sentences(run: dict[str, Any], table: pd.DataFrame, analysis: Analysis | None) -> tuple[str, str]:
    """Measured decode step vs the roofline floor at both ends; memory- vs compute-bound and the ridge."""
    steps = measured(table, "decode_step_ms")
    if steps.empty:
        return ("This run recorded no decode step time, so there is nothing to set against the roofline.",
                "Memory- vs compute-bound needs a measured decode step, so it is not called for this run.")
    predicted = steps.dropna(subset=["predicted_step_ms"]) if "predicted_step_ms" in steps else steps.iloc[0:0]
    if predicted.empty:
        a, z = steps.iloc[0], steps.iloc[-1]
        return (f"This run has no roofline (its model facts or calibration are missing): only the measured decode "
                f"step is shown, {ms(a['decode_step_ms'])} at batch {int(a['batch_size'])} and "
                f"{ms(z['decode_step_ms'])} at batch {int(z['batch_size'])}.",
                "Memory- vs compute-bound needs the roofline, so it is not called for this run.")
    a, z = predicted.iloc[0], predicted.iloc[-1]
    ends = [f"{ms(p['decode_step_ms'])} at batch {int(p['batch_size'])} against a floor of "
            f"{ms(p['predicted_step_ms'])} ({roofline_share(p)} of roofline)" for p in (a, z)]
    first = (f"A decode step takes {ends[0]}." if len(predicted) == 1
             else f"A decode step takes {ends[0]}, and {ends[1]}.")
    first = " ".join(filter(None, (first, whole_cache_sentence(run, z))))
    return first, bound_sentence(run, predicted, analysis.ridge_batch if analysis is not None else None)


def whole_cache_sentence(run: dict[str, Any], point: pd.Series) -> str:
    """Why a point sits far above its floor when its engine reads the whole KV cache it set up every step, not the
    part filled: how much of the distance that read is ("" where the engine reads what is filled, or it is small)."""
    model, calibration, allocated = run.get("model"), run.get("calibration"), value(point, "mem_kv_allocated")
    engine, version = run.get("engine"), (run.get("env") or {}).get("engine")
    if not (decode_reads_whole_cache(engine, run.get("mode"), version) and model and calibration and allocated):
        return ""
    read = float(whole_cache_read_ms(model, calibration, allocated))
    floor, step = float(point["predicted_step_ms"]), float(point["decode_step_ms"])
    if read < WHOLE_CACHE_MATTERS * floor or step <= floor:
        return ""
    share = min(1.0, (read - floor) / (step - floor))
    return (f"At batch {int(point['batch_size'])} this run's engine ({engine} {engine_release(engine, version)}; "
            f"later versions read only what is filled) reads its whole {size(allocated)} KV cache each step, sized "
            f"for the point's longest draw: that read takes at least {ms(read)}, so {pct(share)} of the gap to the "
            f"floor is the engine's padding, not the GPU.")


def bound_sentence(run: dict[str, Any], predicted: pd.DataFrame, ridge: float | None) -> str:
    """Which batches are memory- or compute-bound, why (weights read per step), and where the ridge lies."""
    bounds = predicted["bound"].astype(str).tolist()
    a, z = predicted.iloc[0], predicted.iloc[-1]
    weights = (run.get("model") or {}).get("weight_bytes")
    if set(bounds) == {"memory"}:
        reads = f"the {size(weights)} of weights" if weights else "all the weights"
        grows = (f", so the floor only grows from {ms(a['predicted_step_ms'])} to {ms(z['predicted_step_ms'])} over "
                 f"a {int(z['batch_size']) / int(a['batch_size']):g}× larger batch" if len(predicted) > 1 else "")
        head = f"Every measured batch is memory-bound: each step reads {reads} however many rows it serves{grows}"
    elif set(bounds) == {"compute"}:
        head = "Every measured batch is compute-bound: the matrix math, not reading the weights, sets the floor"
    else:
        first_compute = int(predicted.loc[predicted["bound"] == "compute", "batch_size"].min())
        head = f"Batches below {first_compute} are memory-bound and from {first_compute} on compute-bound"
    if ridge is None:
        return (head + "; there is no ridge: at this context length each added row's KV costs more memory time "
                       "than its compute, so no batch becomes compute-bound.")
    beyond = f", beyond the largest measured ({int(z['batch_size'])})" if ridge > float(z["batch_size"]) else ""
    return head + f"; the ridge, where compute time catches up with memory time, lies near batch {num(ridge)}{beyond}."