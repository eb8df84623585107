"""model.json's numbers before any run exists, from a preset or a local config.json, without torch.

Same formulas as `runners.engines.models.describe()`; tests/test_memory_prediction.py checks the two agree
for every preset and for a local checkpoint directory.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runners.engines.presets import PRESETS
from runners.engines.quant_layout import QUANT_DTYPES, quantized_model_bytes

ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}  # quantised dtypes: bfloat16 activations and KV


def model_config(model_name_or_path: str) -> dict[str, Any]:
    """A preset's config fields, or a local checkpoint's config.json as a dict."""
    if model_name_or_path in PRESETS:
        return dict(PRESETS[model_name_or_path])
    path = Path(model_name_or_path) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"unknown model {model_name_or_path!r}: not a preset ({', '.join(PRESETS)}) "
                                f"and no config.json in that directory")
    return json.loads(path.read_text())


def model_facts(model_name_or_path: str, dtype: str, quantize_lm_head: bool = False) -> dict[str, Any]:
    """The model.json dict: params, weight_bytes, kv_bytes_per_token, shapes, context, dtype."""
    config = model_config(model_name_or_path)
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    inter = config["intermediate_size"]
    layers = config["num_hidden_layers"]
    vocab = config["vocab_size"]
    architecture = config.get("model_type", "")
    attn = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    if config.get("attention_bias", False) or architecture == "qwen2":
        attn += heads * head_dim + 2 * kv_heads * head_dim
    per_layer = attn + 3 * hidden * inter + 2 * hidden
    tied = config.get("tie_word_embeddings", False)
    lm_head = 0 if tied else vocab * hidden
    params = layers * per_layer + vocab * hidden + lm_head + hidden
    elem = ELEMENT_BYTES.get(dtype, 2)
    weight_bytes = params * elem
    if dtype in QUANT_DTYPES:
        weight_bytes = quantized_model_bytes(params, layers, hidden, heads, kv_heads, head_dim, inter, vocab, tied,
                                             quantize_lm_head)
    return {
        "name": model_name_or_path, "source": "preset" if model_name_or_path in PRESETS else "local",
        "architecture": architecture, "params": params, "weight_bytes": weight_bytes,
        "kv_bytes_per_token": 2 * layers * kv_heads * head_dim * elem, "layers": layers, "hidden": hidden,
        "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "intermediate": inter, "vocab": vocab,
        "context": config["max_position_embeddings"], "dtype": dtype, "quantize_lm_head": quantize_lm_head,
        "quant_logits_cosine": None, "quant_token_agreement": None, "quant_accuracy": None,  # measured at load
        "quant_tiles": None, "quant_layer_error_median": None, "quant_layer_error_max": None,
        "tensor_parallel": 1,  # a tensor-parallel run's model.json holds one rank's byte counts instead
    }


def quant_note(model: dict[str, Any] | None) -> str | None:
    """What a quantised run's accuracy check (from model.json) says, and on random weights what it does
    not; None for other runs. Runs from before the check kept a relative error instead."""
    if not isinstance(model, dict) or model.get("dtype") not in QUANT_DTYPES:
        return None
    weight_bytes = model.get("weight_bytes") or 0
    amount = f"{weight_bytes / 1e9:.2f} GB" if weight_bytes >= 1e8 else f"{weight_bytes / 1e6:.2f} MB"
    kept = "embeddings and norms" if model.get("quantize_lm_head") else "embeddings, norms and lm_head"
    size = f"{model['dtype']} weights ({amount} with scales; {kept} in bfloat16)"
    checks = model.get("quant_accuracy") or []
    random = model.get("source") == "preset"
    if checks:
        meaningless = " (not meaningful on random weights)" if random else ""
        paths = "; ".join(f"{c['rows']} rows through {c['kernel']}: logits cosine {c['logits_cosine']:.4f}, "
                          f"greedy tokens agree {c['token_agreement']:.0%}{meaningless}" for c in checks)
        said = (f"{size}{product_words(model)}. Against the bfloat16 model on the same weights over 32 "
                f"teacher-forced decode steps — {paths}.")
    elif model.get("quant_logits_rel_error") is not None:
        said = (f"{size}: last-position logits differ from the bfloat16 model on the same weights by "
                f"{model['quant_logits_rel_error']:.2%} (relative L2).")
    else:
        return None
    if random:
        said += (" These are random weights: their logits are nearly flat noise, so the end-to-end numbers say how "
                 "much the quantised kernels change this network's output, not how a trained model's answers "
                 "would change; the per-product error does not depend on that.")
    return said


def product_words(model: dict[str, Any]) -> str:
    """`; each matrix product's own error vs bfloat16: median 0.90%, worst 0.97%`, when the run measured it."""
    median, worst = model.get("quant_layer_error_median"), model.get("quant_layer_error_max")
    if median is None or worst is None:
        return ""
    return f"; each matrix product's own error vs bfloat16: median {median:.2%}, worst {worst:.2%}"
