"""Several processes in the spec: `tensor_parallel` and `replicas`, checked torch-free (GPU counts are
checked in runners.engines.devices once the device is known)."""
from __future__ import annotations

from runners.engines.quant_layout import QUANT_DTYPES
from runners.spec.options import record
from runners.spec.sweep import SweepSpec, checkpoint_config, config_count


def world_size(spec: SweepSpec) -> int:
    """Processes the sweep runs: one per rank (tensor parallel) or per replica."""
    return max(spec.tensor_parallel, spec.replicas)


def model_shape(model: str) -> dict[str, int]:
    """Heads, KV heads and intermediate size of a preset or a local checkpoint's config.json."""
    config = checkpoint_config(model)
    heads = config_count(config, "num_attention_heads", model)
    kv_heads = config_count(config, "num_key_value_heads", model) if config.get("num_key_value_heads") else heads
    return {"heads": heads, "kv_heads": kv_heads, "intermediate size": config_count(config, "intermediate_size", model)}


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
    shape = record(found, "model", lambda: model_shape(spec.model))
    if shape is None:
        return
    if shape["kv_heads"] < tp:
        found.setdefault("tensor_parallel", f"{spec.model} has {shape['kv_heads']} KV heads, fewer than "
                                            f"tensor_parallel {tp}: replicating KV heads over ranks is unsupported")
        return
    for name, count in shape.items():
        if count % tp:
            found.setdefault("tensor_parallel", f"tensor_parallel {tp} must divide the model's {name} ({count})")
