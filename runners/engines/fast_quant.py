"""Quantise a FastDecoder's matrices at load, free their bfloat16 copies, and guard the accuracy.

The guard runs the same random prompt batch through the decoder before and after quantisation and
returns the relative error of the last-position logits, ‖q − ref‖ / ‖ref‖, so a broken kernel shows
up as a large number next to a fast one. It runs the prefill path (same quantised weights, same
`quant.linear`, eager), not the captured decode graph.
"""
from __future__ import annotations

import torch
from torch import Tensor

from runners.engines.fast_model import FastDecoder
from runners.engines.ragged import Chunk, pack
from runners.quant import QuantWeight, quantize

MATRICES = ("wqkv", "wo", "w13", "w2")
GUARD_ROWS, GUARD_LEN = 4, 32


@torch.no_grad()
def quantize_decoder(decoder: FastDecoder, hf_model: torch.nn.Module, dtype: str) -> None:
    """Replace each layer's four matrices with QuantWeights, layer by layer, and empty the HF model's
    linear weights (they share storage with the fused matrices), so peak memory is the bfloat16 model
    plus one layer and the bfloat16 copies are gone afterwards. The HF model cannot run after this."""
    for weights, layer in zip(decoder.layers, hf_model.model.layers):
        for name in MATRICES:
            setattr(weights, name, quantize(getattr(weights, name), dtype))
        for module in layer.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.data = torch.empty(0, dtype=module.weight.dtype, device=module.weight.device)


def decoder_weight_bytes(decoder: FastDecoder) -> int:
    """Bytes of every tensor the decoder reads, each storage counted once (tied embeddings)."""
    tensors: list[Tensor] = [decoder.embed, decoder.norm, decoder.lm_head]
    for weights in decoder.layers:
        for value in vars(weights).values():
            if isinstance(value, QuantWeight):
                tensors += [value.q, value.scale]
            elif isinstance(value, Tensor):
                tensors.append(value)
    seen: dict[int, int] = {}
    for t in tensors:
        seen[t.data_ptr()] = max(seen.get(t.data_ptr(), 0), t.numel() * t.element_size())
    return sum(seen.values())


def quantize_with_guard(decoder: FastDecoder, hf_model: torch.nn.Module, dtype: str, seed: int = 0) -> float:
    """Quantise the decoder in place; return the last-position logits' relative error vs bfloat16."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, decoder.embed.shape[0], (GUARD_ROWS, GUARD_LEN), generator=gen)
    reference = _last_logits(decoder, ids)
    quantize_decoder(decoder, hf_model, dtype)
    quantized = _last_logits(decoder, ids)
    return float(torch.linalg.vector_norm(quantized - reference) / torch.linalg.vector_norm(reference))


def _last_logits(decoder: FastDecoder, ids: Tensor) -> Tensor:
    state = decoder.new_state(ids.shape[0], ids.shape[1], 1)
    chunks = [Chunk(row, 0, prompt, emit=len(prompt) - 1) for row, prompt in enumerate(ids.tolist())]
    return decoder.prefill(pack(chunks, decoder.device), state).float()
