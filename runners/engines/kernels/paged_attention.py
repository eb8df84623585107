"""Decode attention over a paged KV cache: each row reads only its own blocks, up to its own length.

Why: a masked matmul over a slot cache makes every decode row read its slot to the cache's full length, so a
step of mixed lengths read about twice the bytes its rows hold (docs/benchmarks.md, issue 32), and a static
batch's step read the cache set up for its point's longest draw from the first step on. Here the cache is
a pool of fixed-size blocks, `[blocks × block_size, kv_heads, head_dim]` (token-major inside a block, so
the packed prefill writes and gathers it with one flat index per token), and a row's block table
names the blocks that hold its positions 0, 1, 2, … in order: a continuous pool's in any order, the
static slot cache's contiguous (runners.engines.fast_model.DecodeState).

On a GPU the attention is a split-K ("flash-decoding") Triton kernel: each program takes one row, one
KV head (its whole query group at once, so every K/V byte is read once) and one span of the row's
tokens, walks that span in tiles through the block table with an online softmax, and writes a partial
result; a second kernel merges the spans. Spans past a row's length return at once, so the work
follows the rows' own lengths, and lengths and tables are tensors: one CUDA graph serves every length.
Elsewhere (CPU tests, float32) the same function is computed by gathering each row's keys through its
table and running a masked softmax: the reference the kernel is checked against.
"""
from __future__ import annotations

import torch
from torch import Tensor



def flat_index(table: Tensor, slot: Tensor, pos: Tensor, block_size: int) -> Tensor:
    """Pool row of position `pos` of the request in `slot`: its block's first row plus the offset."""
    return table[slot, pos // block_size].long() * block_size + pos % block_size


def reference(q: Tensor, k_pool: Tensor, v_pool: Tensor, table: Tensor, lens: Tensor, block_size: int) -> Tensor:
    """q [B, heads, D] against each row's first lens[b] cached tokens; [B, heads, D]. A row of length 0
    (a parked slot) gets zeros. Gathers up to the longest row only (reading that length is a host sync:
    this path never runs inside a CUDA graph), and zeroes what a row does not hold before using it, as the
    kernel's masked loads do: whatever lies past a row's length cannot reach its result."""
    B, heads, D = q.shape
    kv_heads = k_pool.shape[1]
    tok = torch.arange(-(-int(lens.max()) // block_size) * block_size, device=q.device)
    rows = torch.arange(B, device=q.device)[:, None]
    idx = flat_index(table, rows, tok[None, :], block_size)  # [B, L]
    valid = tok[None, :] < lens[:, None]
    unheld = ~valid[:, :, None, None]
    k = k_pool[idx].float().masked_fill(unheld, 0.0)  # [B, L, kv_heads, D]
    v = v_pool[idx].float().masked_fill(unheld, 0.0)
    qg = q.float().view(B, kv_heads, heads // kv_heads, D)
    scores = torch.einsum("bkgd,blkd->bkgl", qg, k) * D**-0.5
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    p = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("bkgl,blkd->bkgd", p, v).reshape(B, heads, D).to(q.dtype)


@torch.library.custom_op("batchscope::paged_decode_attention", mutates_args=())
def paged_decode_attention(q: Tensor, k_pool: Tensor, v_pool: Tensor, table: Tensor, lens: Tensor,
                           block_size: int) -> Tensor:
    """Attention of one new query per row over the row's paged cache (see the module docstring)."""
    if q.is_cuda:
        from runners.engines.kernels import paged_kernels  # Triton: CUDA builds of torch ship it; CPU ones need not
        return paged_kernels.decode(q, k_pool, v_pool, table, lens, block_size)
    return reference(q, k_pool, v_pool, table, lens, block_size)


@paged_decode_attention.register_fake
def _(q: Tensor, k_pool: Tensor, v_pool: Tensor, table: Tensor, lens: Tensor, block_size: int) -> Tensor:
    return torch.empty_like(q)
