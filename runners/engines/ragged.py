"""Prompt chunks of different lengths packed into one prefill forward, and attention over them.

One engine step may prefill several requests (continuous batching) or a whole static batch. Packing
their tokens into one [tokens, hidden] tensor lets every matmul of the step run once over all of
them, instead of once per request; only attention needs to know where one chunk ends and the next
begins. Each chunk attends to its own slot's cache up to its last token (earlier chunks of the same
prompt included), so a chunk of n tokens starting at cache position p has n queries and p + n keys,
causal with the queries aligned to the end of the keys.

On CUDA in 16-bit floats, attention is FlashAttention-2's variable-length kernel as PyTorch ships it
(`aten._flash_attention_forward` with cumulative sequence offsets; it reads grouped KV heads
natively and aligns a causal mask bottom-right when there are more keys than queries). Elsewhere
(CPU tests, float32) each chunk runs through SDPA with an explicit mask: the same result, slower.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

TOKEN_ALIGN = 8  # packed token counts are padded to a multiple: never 1, so compiled pieces never re-specialise


@dataclass
class Chunk:
    """`ids` go into cache slot `slot` at positions pos0, pos0+1, …; `emit` is the index in `ids` whose
    logits give the request's first output token, or None while its prompt is not finished."""

    slot: int
    pos0: int
    ids: list[int]
    emit: int | None = None


@dataclass
class PackedPrefill:
    """Device tensors of one prefill forward; built on the host and copied over in one transfer."""

    ids: Tensor  # [padded] token ids, PAD after the `tokens` real ones
    pos: Tensor  # [padded] cache and rope position of each token (0 for the padding)
    slot: Tensor  # [tokens] cache slot of each token
    key_slot: Tensor  # [keys] slot and position of every key each chunk attends to, chunk after chunk
    key_pos: Tensor
    emit: Tensor  # [emitted] index into the packed tokens of each emitting chunk's last token
    emit_slot: Tensor  # [emitted] their slots
    chunk_slot: Tensor  # [chunks]
    chunk_end: Tensor  # [chunks] the cache position a chunk's slot continues from
    cu_q: Tensor  # [chunks + 1] int32 offsets of each chunk's queries
    cu_k: Tensor  # [chunks + 1] int32 offsets of each chunk's keys
    tokens: int
    max_q: int
    max_k: int
    spans: list[tuple[int, int, int, int]]  # (q start, q end, key start, key end) per chunk, on the host


def pack(chunks: list[Chunk], device: torch.device, pad_id: int = 0) -> PackedPrefill:
    """Index tensors for `chunks`, made with vectorised CPU ops (a static batch of 256 × 2k tokens is
    half a million positions) and moved in one pinned, non-blocking copy: no host sync."""
    n = torch.tensor([len(c.ids) for c in chunks])
    pos0 = torch.tensor([c.pos0 for c in chunks])
    slots = torch.tensor([c.slot for c in chunks])
    keys = pos0 + n
    cu_q, cu_k = _offsets(n), _offsets(keys)
    tokens, total_keys = int(cu_q[-1]), int(cu_k[-1])
    padded = -(-tokens // TOKEN_ALIGN) * TOKEN_ALIGN
    ids = torch.full((padded,), pad_id, dtype=torch.long)
    ids[:tokens] = torch.tensor([t for c in chunks for t in c.ids], dtype=torch.long)
    pos = torch.zeros(padded, dtype=torch.long)
    pos[:tokens] = _ranges(pos0, n)
    emitting = [k for k, c in enumerate(chunks) if c.emit is not None]
    emit = torch.tensor([int(cu_q[k]) + chunks[k].emit for k in emitting], dtype=torch.long)
    chunk_end = pos0 + torch.tensor([n_k if c.emit is None else c.emit + 1 for c, n_k in zip(chunks, n.tolist())])
    parts = {
        "ids": ids, "pos": pos, "slot": slots.repeat_interleave(n), "key_slot": slots.repeat_interleave(keys),
        "key_pos": _ranges(torch.zeros_like(keys), keys), "emit": emit, "emit_slot": slots[emitting],
        "chunk_slot": slots, "chunk_end": chunk_end, "cu_q": cu_q, "cu_k": cu_k,
    }
    host = torch.cat([t.long() for t in parts.values()])
    if device.type == "cuda":
        host = host.pin_memory()
    flat = host.to(device, non_blocking=True)
    views = dict(zip(parts, flat.split([t.numel() for t in parts.values()])))
    views["cu_q"], views["cu_k"] = views["cu_q"].int(), views["cu_k"].int()
    q_off, k_off = cu_q.tolist(), cu_k.tolist()
    spans = [(q_off[k], q_off[k + 1], k_off[k], k_off[k + 1]) for k in range(len(chunks))]
    return PackedPrefill(**views, tokens=tokens, max_q=int(n.max()), max_k=int(keys.max()), spans=spans)


def _offsets(lengths: Tensor) -> Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])


def _ranges(starts: Tensor, lengths: Tensor) -> Tensor:
    """starts[k], starts[k]+1, …, starts[k]+lengths[k]-1 for every k, concatenated."""
    first = _offsets(lengths)[:-1]
    within = torch.arange(int(lengths.sum())) - first.repeat_interleave(lengths)
    return starts.repeat_interleave(lengths) + within


def attention(q: Tensor, k: Tensor, v: Tensor, batch: PackedPrefill) -> Tensor:
    """q [tokens, heads, dim] against k, v [keys, kv_heads, dim]; returns [tokens, heads, dim]."""
    if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        return torch.ops.aten._flash_attention_forward(
            q, k, v, batch.cu_q, batch.cu_k, batch.max_q, batch.max_k, 0.0, True, False)[0]
    group = q.shape[1] // k.shape[1]
    out = []
    for q0, q1, k0, k1 in batch.spans:
        n, length = q1 - q0, k1 - k0
        mask = torch.ones(n, length, dtype=torch.bool, device=q.device).tril(diagonal=length - n)
        o = F.scaled_dot_product_attention(
            q[q0:q1].transpose(0, 1), k[k0:k1].transpose(0, 1).repeat_interleave(group, 0),
            v[k0:k1].transpose(0, 1).repeat_interleave(group, 0), attn_mask=mask)
        out.append(o.transpose(0, 1))
    return torch.cat(out)
