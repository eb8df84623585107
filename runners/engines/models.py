"""Load a model (preset with random weights, or a local Hugging Face checkpoint) and state its facts."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

from runners.engines.presets import PRESETS
from runners.engines.quant_layout import QUANT_DTYPES, quantized_model_bytes
from runners.spec import SpecError

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    # quantised-weight dtypes load and compute in bfloat16; the fast engine quantises the matrices
    **{name: torch.bfloat16 for name in QUANT_DTYPES},
}


@dataclass
class ModelInfo:
    """The numbers the roofline and the memory split need, derived from the config."""

    name: str
    source: str  # "preset" or "local"
    architecture: str
    params: int
    weight_bytes: int
    kv_bytes_per_token: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    context: int
    dtype: str
    quantize_lm_head: bool = False  # a quantised dtype's output head is one-byte too (runners.engines.quant_layout)
    # measured by the fast engine at load for quantised dtypes (runners.engines.fast_quant): the worst
    # kernel path's mean logits cosine and greedy-token agreement with bfloat16, and every path's check
    quant_logits_cosine: float | None = None
    quant_token_agreement: float | None = None
    quant_accuracy: list[dict] | None = None
    quant_tiles: dict[str, list] | None = None  # the Triton tiles setup chose per matrix on this GPU
    # each decoder matrix product's own relative error against bfloat16 (runners.engines.quant_error): the largest
    # kernel path's median and the worst product; every product is in quant_error.parquet
    quant_layer_error_median: float | None = None
    quant_layer_error_max: float | None = None
    tensor_parallel: int = 1  # over 1, weight_bytes and kv_bytes_per_token are one rank's shard


@dataclass
class LoadedModel:
    model: torch.nn.Module
    config: transformers.PretrainedConfig
    info: ModelInfo
    device: torch.device
    dtype: torch.dtype


def model_config(model: str) -> transformers.PretrainedConfig:
    """The config of a preset name or a local checkpoint directory (never runs remote code)."""
    if model in PRESETS:
        fields = dict(PRESETS[model])
        return AutoConfig.for_model(fields.pop("model_type"), **fields)
    path = Path(model)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"unknown model {model!r}: not a preset ({', '.join(PRESETS)}) "
                                f"and no config.json in that directory")
    return AutoConfig.from_pretrained(path, trust_remote_code=False)


def check_loadable(name: str) -> None:
    """A local checkpoint's config must load without running code the checkpoint ships (BatchScope never
    passes trust_remote_code): SpecError before anything is written, rather than a failed run."""
    if name in PRESETS:
        return
    try:
        model_config(name)
    except ValueError as err:  # transformers' word for a model type it does not know, or remote code
        config = json.loads((Path(name) / "config.json").read_text())  # spec validation read it already
        reason = ("it needs remote code (config.json's auto_map), which BatchScope never runs"
                  if "auto_map" in config else str(err).strip().splitlines()[0])
        raise SpecError("model", f"{name} cannot be loaded: {reason}") from None


def describe(name: str, config: transformers.PretrainedConfig, dtype: str,
             quantize_lm_head: bool = False) -> ModelInfo:
    """Parameter count and KV bytes per token from the config alone (no weights needed)."""
    hidden = config.hidden_size
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    inter = config.intermediate_size
    layers = config.num_hidden_layers
    vocab = config.vocab_size
    attn = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    if getattr(config, "attention_bias", False) or config.model_type == "qwen2":
        attn += heads * head_dim + 2 * kv_heads * head_dim
    mlp = 3 * hidden * inter
    per_layer = attn + mlp + 2 * hidden
    embed = vocab * hidden
    lm_head = 0 if config.tie_word_embeddings else vocab * hidden
    params = layers * per_layer + embed + lm_head + hidden
    elem = torch.empty((), dtype=DTYPES.get(dtype, torch.bfloat16)).element_size()
    weight_bytes = params * elem
    if dtype in QUANT_DTYPES:
        weight_bytes = quantized_model_bytes(params, layers, hidden, heads, kv_heads, head_dim, inter, vocab,
                                             config.tie_word_embeddings, quantize_lm_head)
    return ModelInfo(
        name=name, source="preset" if name in PRESETS else "local", architecture=config.model_type,
        params=params, weight_bytes=weight_bytes, kv_bytes_per_token=2 * layers * kv_heads * head_dim * elem,
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        intermediate=inter, vocab=vocab, context=config.max_position_embeddings, dtype=dtype,
        quantize_lm_head=quantize_lm_head,
    )


def load(name: str, dtype: str, device: torch.device, seed: int = 0, quantize_lm_head: bool = False) -> LoadedModel:
    """Build the model on the device: random weights for a preset, the checkpoint for a local path.
    `quantize_lm_head` travels in the info to the engine that quantises (runners.engines.fast_quant)."""
    config = model_config(name)
    torch_dtype = DTYPES[dtype]
    if name in PRESETS:
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
        _scale_random_weights(model)
    else:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype, trust_remote_code=False)
        model.to(device)
    model.eval()
    info = describe(name, config, dtype, quantize_lm_head)
    info.params = sum(p.numel() for p in model.parameters())
    info.weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return LoadedModel(model=model, config=config, info=info, device=device, dtype=torch_dtype)


@torch.no_grad()
def _scale_random_weights(model: torch.nn.Module) -> None:
    """Keep random activations finite in low precision: init_std weights, unit norms."""
    for module in model.modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            module.weight.normal_(0.0, 0.02)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
        elif hasattr(module, "weight") and module.weight is not None and module.weight.dim() == 1:
            module.weight.fill_(1.0)
