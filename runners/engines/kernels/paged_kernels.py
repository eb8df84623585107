"""Triton kernels of the paged decode attention (runners.engines.kernels.paged_attention says what they compute
and why).

`_partial` runs one program per (row, KV head, span of `split` tokens). It loads the head's whole query
group as one [BLOCK_G, D] tile (padded to 16 rows for the tensor cores: decode attention is bound by
the K/V bytes, so the padding costs nothing measurable), walks its span `tile` tokens at a time, finds
each token's pool row through the block table, and keeps an online softmax in float32. Spans that start
past the row's length return at once. `_merge` rescales and sums the spans of each (row, head).
"""
from __future__ import annotations

import contextlib
import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch import Tensor

_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _tile(t0, end, q, m_i, l_i, acc, K, V, TABLE, b, kh, st_b, sk_t, sk_h, scale, d, dmask,
          PAGE: tl.constexpr, TILE: tl.constexpr):
    """One tile of `TILE` tokens from t0 (masked at `end`) folded into the running softmax."""
    offs = t0 + tl.arange(0, TILE)
    valid = offs < end
    page = tl.load(TABLE + b * st_b + offs // PAGE, mask=valid, other=0)
    row = page.to(tl.int64) * PAGE + offs % PAGE
    kv_mask = valid[:, None] & dmask[None, :]
    k = tl.load(K + row[:, None] * sk_t + kh * sk_h + d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + row[:, None] * sk_t + kh * sk_h + d[None, :], mask=kv_mask, other=0.0)
    qk = tl.dot(q, tl.trans(k)) * scale
    qk = tl.where(valid[None, :], qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


@triton.jit
def _partial(Q, K, V, TABLE, LENS, PO, PM, PL,
             sq_b, sq_h, sk_t, sk_h, st_b, spo_b, spo_h, spo_s, spm_b, spm_h,
             scale,
             GROUP: tl.constexpr, BLOCK_G: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
             PAGE: tl.constexpr, TILE: tl.constexpr, SPLIT: tl.constexpr, DYNAMIC: tl.constexpr):
    b = tl.program_id(0)
    kh = tl.program_id(1)
    s = tl.program_id(2)
    length = tl.load(LENS + b)
    start = s * SPLIT
    if start >= length:
        return
    end = tl.minimum(start + SPLIT, length)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    heads = kh * GROUP + g
    gmask = g < GROUP
    dmask = d < D
    q = tl.load(Q + b * sq_b + heads[:, None] * sq_h + d[None, :], mask=gmask[:, None] & dmask[None, :], other=0.0)
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    if DYNAMIC:  # the compiled kernel: a loop bounded by the row's length, software-pipelined
        for t0 in range(start, end, TILE):
            m_i, l_i, acc = _tile(t0, end, q, m_i, l_i, acc, K, V, TABLE, b, kh, st_b, sk_t, sk_h, scale, d,
                                  dmask, PAGE, TILE)
    else:  # Triton's CPU interpreter takes no loop bound read from memory: a constant trip count instead
        for i in range(0, SPLIT // TILE):
            if start + i * TILE < end:
                m_i, l_i, acc = _tile(start + i * TILE, end, q, m_i, l_i, acc, K, V, TABLE, b, kh, st_b, sk_t,
                                      sk_h, scale, d, dmask, PAGE, TILE)
    out = b * spo_b + heads[:, None] * spo_h + s * spo_s + d[None, :]
    tl.store(PO + out, acc, mask=gmask[:, None] & dmask[None, :])
    tl.store(PM + b * spm_b + heads * spm_h + s, m_i, mask=gmask)
    tl.store(PL + b * spm_b + heads * spm_h + s, l_i, mask=gmask)


@triton.jit
def _merge(O, LENS, PO, PM, PL, so_b, so_h, spo_b, spo_h, spo_s, spm_b, spm_h,
           D: tl.constexpr, BLOCK_D: tl.constexpr, SPLIT: tl.constexpr, BLOCK_S: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    d = tl.arange(0, BLOCK_D)
    dmask = d < D
    n = tl.cdiv(tl.load(LENS + b), SPLIT)
    s = tl.arange(0, BLOCK_S)
    smask = s < n
    m = tl.load(PM + b * spm_b + h * spm_h + s, mask=smask, other=float("-inf"))
    l = tl.load(PL + b * spm_b + h * spm_h + s, mask=smask, other=0.0)
    m_max = tl.max(m, 0)
    w = tl.where(smask, tl.exp(m - m_max), 0.0)
    o = tl.load(PO + b * spo_b + h * spo_h + s[:, None] * spo_s + d[None, :], mask=smask[:, None] & dmask[None, :],
                other=0.0)
    total = tl.sum(l * w, 0)
    merged = tl.sum(o * w[:, None], 0) / tl.where(total > 0, total, 1.0)
    tl.store(O + b * so_b + h * so_h + d, merged.to(O.dtype.element_ty), mask=dmask)


class Config(NamedTuple):
    """Launch choices, measured on an H200 by bench/paged_attention.py (128 and 256 rows)."""

    split: int = 512  # tokens per split-K span
    tile: int = 64  # tokens per loop iteration
    num_warps: int = 4
    num_stages: int = 2


SHORTEST_SPLIT = 128  # 64-token spans measured within 1 µs of 128 at 1–4 rows on an H100 (docs/benchmarks.md)
PROGRAMS_PER_SM = 4  # at 4 rows 192 programs on 132 SMs took 31 % longer than 672; at 16, 768 matched 2 688


def config_for(rows: int, kv_heads: int, positions: int, sms: int) -> Config:
    """The default launch, its span halved (down to SHORTEST_SPLIT) while rows × KV heads × spans gives the
    GPU fewer than PROGRAMS_PER_SM programs an SM. Why: one row's 8 KV heads over a 2 624-position cache in
    512-token spans are 48 programs on 132 SMs, and fast 3's batch-1 step took 4 % longer than this launch's
    (docs/benchmarks.md). The count uses the cache's positions, not the rows' lengths: one captured graph
    serves every length."""
    split = Config().split
    while split > SHORTEST_SPLIT and rows * kv_heads * triton.cdiv(positions, split) < PROGRAMS_PER_SM * sms:
        split //= 2
    return Config(split=split)


def decode(q: Tensor, k_pool: Tensor, v_pool: Tensor, table: Tensor, lens: Tensor, block_size: int,
           config: Config | None = None) -> Tensor:
    """q [B, heads, D]; pools [rows, kv_heads, D]; table [B, max_blocks] int32; lens [B]. Returns [B, heads, D].
    Without a config, config_for picks the launch for these rows on this GPU."""
    B, heads, D = q.shape
    kv_heads = k_pool.shape[1]
    group = heads // kv_heads
    positions = table.shape[1] * block_size
    if config is None:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 1
        config = config_for(B, kv_heads, positions, sms)
    split = config.split
    spans = triton.cdiv(positions, split)
    q = q.contiguous()
    partial_o = torch.empty(B, heads, spans, D, dtype=torch.float32, device=q.device)
    partial_m = torch.empty(B, heads, spans, dtype=torch.float32, device=q.device)
    partial_l = torch.empty_like(partial_m)
    block_d = triton.next_power_of_2(D)
    with torch.cuda.device(q.device) if q.is_cuda else contextlib.nullcontext():
        _partial[(B, kv_heads, spans)](
            q, k_pool, v_pool, table, lens, partial_o, partial_m, partial_l,
            q.stride(0), q.stride(1), k_pool.stride(0), k_pool.stride(1), table.stride(0),
            partial_o.stride(0), partial_o.stride(1), partial_o.stride(2), partial_m.stride(0), partial_m.stride(1),
            D**-0.5, GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group)), D=D, BLOCK_D=block_d,
            PAGE=block_size, TILE=config.tile, SPLIT=split, DYNAMIC=not _INTERPRETED,
            num_warps=config.num_warps, num_stages=config.num_stages)
        out = torch.empty_like(q)
        _merge[(B, heads)](
            out, lens, partial_o, partial_m, partial_l, out.stride(0), out.stride(1),
            partial_o.stride(0), partial_o.stride(1), partial_o.stride(2), partial_m.stride(0), partial_m.stride(1),
            D=D, BLOCK_D=block_d, SPLIT=split, BLOCK_S=max(2, triton.next_power_of_2(spans)), num_warps=4)
    return out
