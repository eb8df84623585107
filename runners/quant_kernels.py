"""A Triton matmul that reads one-byte weights (fp8 e4m3 or int8) and applies their row scales at the end.

Why our own kernel: at decode batch sizes the step is memory-bound, so the only way quantised weights
make it faster is a kernel that streams the one-byte weights once and converts each tile in registers.
Dequantising whole matrices first (or the upcast that torch.compile emits for `F.linear(x, q.to(bf16))`)
reads and writes more bytes than bfloat16 itself; `torch._scaled_mm` needs fp8 activations and gains
nothing below ~64 rows (docs/quantisation.md has the H200 numbers behind this choice).

Each program computes a [BLOCK_M, BLOCK_N] tile of x @ qᵀ: it walks K in BLOCK_K steps, converts the
weight tile in registers and accumulates in float32 on tensor cores (rows are padded to 16, which costs
nothing a memory-bound step can see), then multiplies by the row scales. fp8 tiles convert to float16
(one hardware instruction per pair on Hopper; to bfloat16 there is none, and that path measured 1.06×
bfloat16's time instead of 0.6×), so the fp8 product runs in float16: activations above 65 504 would
overflow, far above what reaches a Llama matmul (normalised, or the MLP's gated product). The programs
of one column block are launched next to each other, so when several row tiles read the same weight
tile the later ones find it in L2.
Configurations are fixed per row bucket instead of autotuned, so nothing is benchmarked while a step is
measured; `warm(...)` compiles each bucket's kernel in setup. Triton ships with torch's CUDA builds.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch import Tensor


class TileConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


# (most rows, config): the first whose bound covers M is used. Small buckets stream weights (many
# narrow column blocks so every SM has loads in flight); large ones are compute tiles.
CONFIGS: tuple[tuple[int, TileConfig], ...] = (
    (16, TileConfig(16, 32, 256, 4, 4)),
    (32, TileConfig(16, 32, 256, 4, 4)),
    (64, TileConfig(32, 64, 128, 4, 3)),
    (128, TileConfig(64, 64, 64, 4, 3)),
    (1 << 62, TileConfig(64, 128, 64, 4, 3)),
)


def config_for(rows: int) -> TileConfig:
    """The tile configuration used for an M-row product."""
    return next(config for most, config in CONFIGS if rows <= most)


@triton.jit(do_not_specialize=["M"])
def _w8_matmul_kernel(x_ptr, w_ptr, scale_ptr, out_ptr, M, N, stride_xm, stride_wn, stride_om, K: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_F16: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        k = step * BLOCK_K + ks
        x = tl.load(x_ptr + rows[:, None] * stride_xm + k[None, :],
                    mask=(rows[:, None] < M) & (k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + cols[:, None] * stride_wn + k[None, :],
                    mask=(cols[:, None] < N) & (k[None, :] < K), other=0.0)
        if DOT_F16:
            acc = tl.dot(x.to(tl.float16), tl.trans(w.to(tl.float16)), acc)
        else:
            acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
    scale = tl.load(scale_ptr + cols, mask=cols < N, other=0.0)
    out = (acc * scale[None, :]).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], out,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def w8_matmul(x: Tensor, q: Tensor, scale: Tensor, config: TileConfig | None = None,
              dot_f16: bool | None = None) -> Tensor:
    """x [M, K] (bfloat16/float16, unit stride in K) @ q [N, K]ᵀ (int8 or float8_e4m3fn) × scale [N].
    `dot_f16` (default: for fp8 weights) multiplies in float16; bench/quant_kernels.py times both."""
    m, k = x.shape
    n = q.shape[0]
    c = config or config_for(m)
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, c.block_m), triton.cdiv(n, c.block_n))
    _w8_matmul_kernel[grid](x, q, scale, out, m, n, x.stride(0), q.stride(0), out.stride(0), K=k,
                            BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k,
                            DOT_F16=q.dtype == torch.float8_e4m3fn if dot_f16 is None else dot_f16,
                            num_warps=c.num_warps, num_stages=c.num_stages)
    return out


@triton.jit
def _fp8_rows_kernel(x_ptr, q_ptr, scale_ptr, stride_xm, K: tl.constexpr, BLOCK_K: tl.constexpr,
                     FP8_MAX: tl.constexpr, TINY: tl.constexpr):
    row = tl.program_id(0)
    ks = tl.arange(0, BLOCK_K)
    x = tl.load(x_ptr + row * stride_xm + ks, mask=ks < K, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.max(tl.abs(x), axis=0), TINY) / FP8_MAX
    tl.store(scale_ptr + row, scale)
    q = tl.minimum(tl.maximum(x / scale, -FP8_MAX), FP8_MAX)
    tl.store(q_ptr + row * K + ks, q.to(q_ptr.dtype.element_ty), mask=ks < K)


def fp8_rows(x: Tensor, fp8_max: float, tiny: float) -> tuple[Tensor, Tensor]:
    """Each row of x [M, K] scaled by its own amax to float8_e4m3fn: (q [M, K], scale [M, 1] float32),
    in one launch (as separate torch ops it was seven, which cost more than the fp8 product saved)."""
    m, k = x.shape
    q = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(m, 1, dtype=torch.float32, device=x.device)
    block = triton.next_power_of_2(k)
    _fp8_rows_kernel[(m,)](x, q, scale, x.stride(0), K=k, BLOCK_K=block, FP8_MAX=fp8_max, TINY=tiny,
                           num_warps=max(4, min(16, block // 1024)))
    return q, scale


def bucket_rows() -> list[int]:
    """One row count per configuration (its bound; twice the last bound for the open-ended one): the
    shapes setup must run so every configuration is compiled before anything is measured."""
    bounds = [most for most, _ in CONFIGS[:-1]]
    return bounds + [2 * bounds[-1]]
