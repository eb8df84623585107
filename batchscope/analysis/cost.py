"""Money and energy per token: a price per GPU-hour (a setting per GPU type) turned into cost per million
output tokens at every point, so tensor parallel vs replicas and bfloat16 vs fp8 compare in money too.

A point occupies tensor_parallel × replicas GPUs (1 when the run did not record them), for as long as its
throughput says: cost per 1M output tokens = price × GPUs ÷ (output tokens/s × 3600) × 1e6. Energy per
output token is the runner's (`energy_per_output_token_j`: every GPU's power integrated over the measured
repeats ÷ the tokens they produced).
"""
from __future__ import annotations

import math

import pandas as pd

from batchscope.analysis.marker import Marker, num

SETTING_PREFIX = "gpu_hour_price:"  # the settings key of a GPU type's price, followed by its name
COST_COLUMNS = ("gpus", "output_tokens_per_s_per_gpu", "cost_per_mtok")


def setting_key(gpu: str) -> str:
    return f"{SETTING_PREFIX}{gpu}"


def device_type(run: dict) -> str:
    """What a price is set for: the GPU's name as env.json gives it, else the device (`cpu`)."""
    return str(run.get("gpu_name") or run.get("device") or "unknown device")


def parse_price(text: str | None) -> float | None:
    """A stored or typed price per GPU-hour; None when absent. ValueError names a bad one."""
    if text is None or str(text).strip() == "":
        return None
    try:
        price = float(text)
    except ValueError:
        raise ValueError(f"a price per GPU-hour is a number, such as 3.50: {text!r}") from None
    if not (math.isfinite(price) and price >= 0):
        raise ValueError(f"a price per GPU-hour cannot be negative: {text!r}")
    return price


def gpus(table: pd.DataFrame) -> pd.Series:
    """GPUs each point occupies: tensor_parallel × replicas, 1 where not recorded."""
    tp = table["tensor_parallel"].fillna(1) if "tensor_parallel" in table else 1
    replicas = table["replicas"].fillna(1) if "replicas" in table else 1
    return (pd.Series(1, index=table.index) * tp * replicas).astype(float)


def with_cost(table: pd.DataFrame, price: float | None) -> pd.DataFrame:
    """The table with COST_COLUMNS (cost null without a price or a throughput)."""
    count = gpus(table)
    tput = table["output_tokens_per_s"].astype(float).where(table["output_tokens_per_s"] > 0)
    cost = price * count / (tput * 3600.0) * 1e6 if price is not None else pd.Series(float("nan"), index=table.index)
    return table.assign(gpus=count, output_tokens_per_s_per_gpu=tput / count, cost_per_mtok=cost)


def at_working_point(table: pd.DataFrame, marker: Marker | None, price: float | None,
                     currency: str = "$", on_gpu: bool = True) -> str | None:
    """One sentence: what the working point costs per 1M output tokens and per token in energy. A run
    `on_gpu` False (a CPU run) is priced per machine-hour and says nothing per GPU."""
    if marker is None:
        return None
    rows = table[(table["x"] == marker.x) & (table["status"] == "ok")]
    if rows.empty:
        return None
    point = with_cost(rows, price).iloc[0]
    count = int(point["gpus"])
    parts = []
    if price is not None and pd.notna(point["cost_per_mtok"]):
        per = (f"GPU-hour × {count} GPU{'s' if count > 1 else ''}" if on_gpu else "hour of the machine")
        parts.append(f"{currency}{point['cost_per_mtok']:.3g} per million output tokens at {currency}{price:g} per {per}")
    energy = point.get("energy_per_output_token_j")
    if energy is not None and pd.notna(energy):
        parts.append(f"{num(float(energy))} J per output token")
    if not on_gpu:
        if not parts:
            return f"At the working point: {num(float(point['output_tokens_per_s']))} tok/s; set a price per hour to read its cost."
        return f"At the working point: {'; '.join(parts)}."
    per_gpu = f"{num(float(point['output_tokens_per_s_per_gpu']))} tok/s per GPU"
    if not parts:
        return f"At the working point: {per_gpu}; set a price per GPU-hour to read its cost."
    return f"At the working point: {'; '.join(parts)} ({per_gpu})."
