"""Several processes in the spec: `tensor_parallel` and `replicas`, checked torch-free (GPU counts are
checked in runners.devices once the device is known)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runners.presets import PRESETS
from runners.quant_layout import QUANT_DTYPES
from runners.spec.sweep import SweepSpec


def world_size(spec: SweepSpec) -> int:
    """Processes the sweep runs: one per rank (tensor parallel) or per replica."""
    return max(spec.tensor_parallel, spec.replicas)


def model_shape(model: str) -> dict[str, int]:
    """Heads, KV heads and intermediate size of a preset or a local checkpoint's config.json."""
    config: dict[str, Any] = PRESETS[model] if model in PRESETS else json.loads((Path(model) / "config.json").read_text())
    heads = int(config["num_attention_heads"])
    return {"heads": heads, "kv_heads": int(config.get("num_key_value_heads") or heads),
            "intermediate size": int(config["intermediate_size"])}


def check(spec: SweepSpec, found: dict[str, str]) -> None:
    """Record problems in `found` (field → message), as the mode checks do."""
    tp, rep = spec.tensor_parallel, spec.replicas
    if tp > 1 and rep > 1:
        found.setdefault("replicas", "tensor_parallel and replicas are different experiments: set only one above 1")
    field = "tensor_parallel" if tp > 1 else "replicas"
    if max(tp, rep) > 1 and spec.mode != "static":
        found.setdefault(field, f"{field} runs static batches only, not mode {spec.mode}")
    if rep > 1 and spec.batch_sizes and min(spec.batch_sizes) < rep:
        found.setdefault("batch_sizes", f"batch {min(spec.batch_sizes)} is smaller than replicas {rep}: "
                                        f"every replica needs at least one request")
    if tp == 1:
        return
    if spec.engine != "fast":
        found.setdefault("engine", "tensor_parallel needs the fast engine")
    if spec.dtype in QUANT_DTYPES:
        found.setdefault("dtype", f"tensor_parallel does not implement quantised weights ({spec.dtype})")
    if "model" in found:
        return
    shape = model_shape(spec.model)
    if shape["kv_heads"] < tp:
        found.setdefault("tensor_parallel", f"{spec.model} has {shape['kv_heads']} KV heads, fewer than "
                                            f"tensor_parallel {tp}: replicating KV heads over ranks is unsupported")
        return
    for name, count in shape.items():
        if count % tp:
            found.setdefault("tensor_parallel", f"tensor_parallel {tp} must divide the model's {name} ({count})")
