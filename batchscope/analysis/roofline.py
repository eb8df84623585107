"""Roofline: the fastest a decode step or a prefill could run on this device, from two ceilings.

predicted time = max(bytes / copy bandwidth, FLOPs / matmul rate), both ceilings measured by
`runners.telemetry.calibrate` (calibration.json). The roofline is a floor for an ideal engine, so it counts
what must be read and computed, not what an engine happens to touch:

- decode bytes = weights + KV of the active rows (`active_tokens_mean` × KV bytes/token). Left out:
  logits (B × vocab × 2 B: 66 MB for Llama-3.1-8B at B = 256, 0.4 % of its 16 GB weights), hidden
  activations (B × hidden, smaller still) and the one new KV row per sequence (1/context of the KV).
- decode FLOPs = 2 × params × batch_size + attention 4 × layers × heads × head_dim × context per row
  × batch_size. A static batch computes its finished rows too, so all batch_size rows count.
  2 × params also counts the input embedding, which is a lookup, not a matmul (≤ 7 % for 8B models).
- prefill FLOPs = 2 × params × padded tokens + causal attention 2 × layers × heads × head_dim × len²
  per row; padded tokens = batch_size × prompt_len_mean / (1 − prefill_padding_waste), since padding
  is computed. Prefill bytes = weights + the KV it writes.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

ROOFLINE_COLUMNS = ["decode_bytes", "decode_flops", "predicted_step_ms", "step_ratio", "roofline_pct", "bound",
                    "prefill_bytes", "prefill_flops", "predicted_prefill_ms", "prefill_ratio",
                    "prefill_roofline_pct", "prefill_bound", "predicted_tokens_per_s"]


def attention_flops_per_context_token(model: dict) -> float:
    """FLOPs one query row spends per cached token in one step: QKᵀ and PV, 2 × heads × head_dim each."""
    return 4.0 * model["layers"] * model["heads"] * model["head_dim"]


def decode_bytes(model: dict, kv_tokens: float | np.ndarray) -> float | np.ndarray:
    return model["weight_bytes"] + np.asarray(kv_tokens, dtype=float) * model["kv_bytes_per_token"]


def decode_flops(model: dict, rows: float | np.ndarray, context_per_row: float | np.ndarray) -> float | np.ndarray:
    rows = np.asarray(rows, dtype=float)
    return rows * (2.0 * model["params"] + attention_flops_per_context_token(model) * np.asarray(context_per_row))


def prefill_bytes(model: dict, rows: float | np.ndarray, padded_len: float | np.ndarray) -> float | np.ndarray:
    return model["weight_bytes"] + np.asarray(rows, dtype=float) * padded_len * model["kv_bytes_per_token"]


def prefill_flops(model: dict, rows: float | np.ndarray, padded_len: float | np.ndarray) -> float | np.ndarray:
    padded_len = np.asarray(padded_len, dtype=float)
    causal = attention_flops_per_context_token(model) / 2.0 * padded_len**2
    return np.asarray(rows, dtype=float) * (2.0 * model["params"] * padded_len + causal)


def roofline_ms(calibration: dict, n_bytes, flops) -> tuple[np.ndarray, np.ndarray]:
    """(predicted ms, bound) where bound is "memory" when the byte time is the larger one."""
    memory_s = np.asarray(n_bytes, dtype=float) / calibration["copy_bytes_per_s"]
    compute_s = np.asarray(flops, dtype=float) / calibration["matmul_flops_per_s"]
    bound = np.where(memory_s >= compute_s, "memory", "compute")
    return np.maximum(memory_s, compute_s) * 1e3, bound


def context_per_row(points: pd.DataFrame) -> pd.Series:
    """Mean cached tokens of an active row per decode step; prompt + half the output when unknown."""
    measured = points["active_tokens_mean"] / points["active_seqs_mean"].where(points["active_seqs_mean"] > 0)
    return measured.fillna(points["prompt_len_mean"] + points["output_len_mean"] / 2.0)


def decode_steps(points: pd.DataFrame) -> pd.Series:
    """Decode steps per batch: real decode tokens ÷ active rows per step (token 0 comes from prefill)."""
    real_decode_tokens = points["batch_size"] * (points["output_len_mean"] - 1.0)
    active = points["active_seqs_mean"].where(points["active_seqs_mean"] > 0)
    return (real_decode_tokens / active).fillna(points["output_len_mean"] - 1.0)


def roofline_table(points: pd.DataFrame, model: dict, calibration: dict) -> pd.DataFrame:
    """The points with the ROOFLINE_COLUMNS added (NaN where a point lacks the numbers, e.g. OOM).

    ratios are measured / predicted (≥ 1 for an honest floor); `*_roofline_pct` = predicted /
    measured × 100. `predicted_tokens_per_s` is real output tokens ÷ (predicted prefill + decode
    steps × predicted step), the same definition as the measured `output_tokens_per_s`.

    A continuous (online-serving) point decodes its mean active rows per step, not its batch limit,
    and its throughput follows the arrivals while its prefills come in chunks: only its decode step
    gets a floor; its prefill and throughput predictions stay NaN.
    """
    table = points.copy()
    online = table["sweep_axis"].notna() if "sweep_axis" in table else pd.Series(False, index=table.index)
    rows = table["batch_size"].astype(float).where(~online, table["active_seqs_mean"])
    table["decode_bytes"] = decode_bytes(model, table["active_tokens_mean"])
    table["decode_flops"] = decode_flops(model, rows, context_per_row(table))
    step_ms, bound = roofline_ms(calibration, table["decode_bytes"], table["decode_flops"])
    table["predicted_step_ms"] = step_ms
    table["step_ratio"] = table["decode_step_ms"] / table["predicted_step_ms"]
    table["roofline_pct"] = 100.0 / table["step_ratio"]
    table["bound"] = np.where(np.isnan(step_ms), None, bound)
    padded_len = table["prompt_len_mean"] / (1.0 - table["prefill_padding_waste"].fillna(0.0))
    table["prefill_bytes"] = prefill_bytes(model, rows, padded_len)
    table["prefill_flops"] = prefill_flops(model, rows, padded_len)
    prefill_ms, prefill_bound = roofline_ms(calibration, table["prefill_bytes"], table["prefill_flops"])
    table["predicted_prefill_ms"] = prefill_ms
    table["prefill_ratio"] = table["prefill_ms"] / table["predicted_prefill_ms"]
    table["prefill_roofline_pct"] = 100.0 / table["prefill_ratio"]
    table["prefill_bound"] = np.where(np.isnan(prefill_ms), None, prefill_bound)
    wall_s = (table["predicted_prefill_ms"] + decode_steps(table) * table["predicted_step_ms"]) / 1e3
    table["predicted_tokens_per_s"] = rows * table["output_len_mean"] / wall_s
    prefill_and_throughput = ROOFLINE_COLUMNS[ROOFLINE_COLUMNS.index("prefill_bytes"):]
    table.loc[online, prefill_and_throughput] = np.nan
    table.loc[online, "prefill_bound"] = None
    return table


def whole_cache_read_ms(model: dict, calibration: dict, kv_allocated_bytes: float | np.ndarray) -> np.ndarray:
    """The byte floor of a decode step that reads the weights and the point's whole allocated KV cache
    (`mem_kv_allocated`), as an engine does whose step attends over all of it (registry:
    `decode_reads_whole_cache`); NaN where the point has no KV figure."""
    read = model["weight_bytes"] + np.asarray(kv_allocated_bytes, dtype=float)
    return roofline_ms(calibration, read, np.zeros_like(read))[0]


def ridge_batch(model: dict, calibration: dict, context_tokens: float) -> float | None:
    """The batch where a decode step's FLOP time equals its byte time, solved from the model.

    With c = context per row: W/BW + B·c·kv/BW = B·(2·P + a·c)/peak, so
    B = (W/BW) / ((2·P + a·c)/peak − c·kv/BW). None when the denominator is ≤ 0: each added row then
    costs more byte time (its KV) than FLOP time, and decode is memory-bound at every batch size.
    """
    bw, peak = calibration["copy_bytes_per_s"], calibration["matmul_flops_per_s"]
    per_row = ((2.0 * model["params"] + attention_flops_per_context_token(model) * context_tokens) / peak
               - context_tokens * model["kv_bytes_per_token"] / bw)
    if per_row <= 0:
        return None
    return model["weight_bytes"] / bw / per_row


def predicted_curve(model: dict, calibration: dict, batch_sizes: list[int], prompt_len: float,
                    output_len: float) -> pd.DataFrame:
    """The roofline's throughput for a fixed-length workload (no padding), for a chart overlay.

    Every row holds prompt_len + output_len / 2 tokens on average over the decode, and a batch takes
    output_len − 1 decode steps after its prefill.
    """
    rows = np.asarray(batch_sizes, dtype=float)
    context = prompt_len + output_len / 2.0
    step_ms, bound = roofline_ms(calibration, decode_bytes(model, rows * context), decode_flops(model, rows, context))
    prefill_ms, _ = roofline_ms(calibration, prefill_bytes(model, rows, prompt_len),
                                prefill_flops(model, rows, prompt_len))
    wall_s = (prefill_ms + (output_len - 1.0) * step_ms) / 1e3
    return pd.DataFrame({"batch_size": list(batch_sizes), "predicted_step_ms": step_ms,
                         "predicted_prefill_ms": prefill_ms, "predicted_tokens_per_s": rows * output_len / wall_s,
                         "bound": bound})
