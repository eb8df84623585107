"""int8 activations × int8 weights on int8 tensor cores, with both scales applied as the tile is stored.

Why our own kernel: above `quant.TENSOR_CORE_ROWS` rows the engine quantises each token's activations and
multiplies one-byte operands, where `torch._int_mm` (cuBLASLt) and a separate scale pass measured 1.36×
bfloat16's time for an 8B layer at 256 rows on the H200, while fp8's `_scaled_mm` took 0.75×: the int8
operands could be twice as fast as bfloat16, the library path is not. Here Triton's `tl.dot` on int8 tiles
(Hopper's int8 matrix instructions), int32 accumulators, and the per-token × per-channel scales fused
into the store, so the int32 product never goes to memory.

Which path is faster depends on the row count and the GPU, so setup (`choose`) times this kernel's
CANDIDATES and the `_int_mm` path on the model's own weights at each of ROW_BUCKETS rows and keeps,
per weight shape and bucket, the faster; `config_for` answers at run time (None: `_int_mm`). Nothing
is timed while a step is measured, and the row count is not specialised on, so one compile per
configuration and K serves every row count.
"""
from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from runners.engines.kernels.quant_kernels import graph_replay_ms, on_device


class GemmConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    group_m: int  # row tiles that walk the column tiles together, so their weight tiles are read from L2
    num_warps: int
    num_stages: int


# 64 × 64 tiles: a 4096-column matrix at 256 rows is 64 tiles of 128 × 128, half the H200's multiprocessors
CANDIDATES = (GemmConfig(64, 128, 128, 8, 4, 4), GemmConfig(128, 128, 128, 8, 8, 3),
              GemmConfig(128, 256, 128, 8, 8, 3), GemmConfig(64, 256, 128, 8, 8, 3),
              GemmConfig(128, 128, 64, 8, 4, 4), GemmConfig(64, 64, 128, 8, 4, 4))
# A product of M rows takes the choice of the largest bucket ≤ M. Every power of two: with buckets 32, 128,
# 512, 2048 the H200 chose `_int_mm` for the 8B down projection at 128 rows, and at 256 rows that product
# took 1.52× bfloat16's time (2026-12-03)
ROW_BUCKETS = (32, 64, 128, 256, 512, 1024, 2048)
TIMED_LAYERS = 8  # copies of a matrix per timed graph: more weight bytes than L2 holds, as in a step
TIMED_REPLAYS = 5
CHOSEN: dict[tuple[int, int], list[GemmConfig | None]] = {}  # (N, K) → per bucket; None: `_int_mm`
Quantize = Callable[[Tensor], tuple[Tensor, Tensor]]  # activations → (int8 rows, their scales [M, 1])
IntMmProduct = Callable[[Tensor, Tensor, Tensor, Tensor, torch.dtype], Tensor]  # (xq, x_scale, q, scale, dtype)


def config_for(rows: int, n: int, k: int) -> GemmConfig | None:
    """This kernel's configuration for an M-row product with an [N, K] int8 weight, or None where setup
    found `_int_mm` faster (or chose nothing: the path the engine took before this kernel)."""
    chosen = CHOSEN.get((n, k))
    if chosen is None:
        return None
    return chosen[max(0, bisect.bisect_right(ROW_BUCKETS, rows) - 1)]


def choose(weights: list[tuple[Tensor, Tensor]], x_dtype: torch.dtype, quantize: Quantize,
           int_mm: IntMmProduct) -> list[GemmConfig | None]:
    """Per bucket, the faster of `int_mm` (the `_int_mm` path) and each candidate on random activations with the
    first TIMED_LAYERS of `weights` (all layers' copies of one matrix), `quantize` (the per-token activation
    quantisation) included, each variant one CUDA graph, its median replay; kept in CHOSEN and returned. Runs in
    setup. The two paths it compares with come from `quant`, which calls this module: passed in, not imported."""
    q0 = weights[0][0]
    n, k = q0.shape
    picks: list[GemmConfig | None] = []
    with on_device(q0.device):
        for rows in ROW_BUCKETS:
            x = torch.randn(rows, k, dtype=x_dtype, device=q0.device)
            times: dict[GemmConfig | None, float] = {}
            for config in (None, *CANDIDATES):
                def run(config: GemmConfig | None = config) -> None:
                    xq, x_scale = quantize(x)
                    for q, scale in weights[:TIMED_LAYERS]:
                        if config is None:
                            int_mm(xq, x_scale, q, scale, x_dtype)
                        else:
                            matmul(xq, x_scale, q, scale, x_dtype, config)
                try:
                    times[config] = statistics.median(graph_replay_ms(run, TIMED_REPLAYS))
                except triton.runtime.errors.OutOfResources:  # tiles over this GPU's shared memory: no candidate
                    continue
            picks.append(min(times, key=times.get))
    torch.cuda.empty_cache()  # the timing graphs' buffers (a 2048-row product's output) back to the device
    CHOSEN[(n, k)] = picks
    return picks


@triton.jit(do_not_specialize=["M"])
def _int8_gemm_kernel(a_ptr, b_ptr, a_scale_ptr, b_scale_ptr, out_ptr, M, N, stride_am, stride_bn, stride_om,
                      K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * tiles_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # rows × N passes 2³¹ in a long prefill
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        k = step * BLOCK_K + ks
        a = tl.load(a_ptr + rows[:, None] * stride_am + k[None, :], mask=(rows[:, None] < M) & (k[None, :] < K),
                    other=0)
        b = tl.load(b_ptr + cols[:, None] * stride_bn + k[None, :], mask=(cols[:, None] < N) & (k[None, :] < K),
                    other=0)
        acc = tl.dot(a, tl.trans(b), acc, out_dtype=tl.int32)
    a_scale = tl.load(a_scale_ptr + rows, mask=rows < M, other=0.0)
    b_scale = tl.load(b_scale_ptr + cols, mask=cols < N, other=0.0)
    out = acc.to(tl.float32) * a_scale[:, None] * b_scale[None, :]
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], out.to(out_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul(xq: Tensor, x_scale: Tensor, q: Tensor, scale: Tensor, dtype: torch.dtype, config: GemmConfig) -> Tensor:
    """xq [M, K] int8 × x_scale [M, 1] @ (q [N, K] int8 × scale [N])ᵀ, in `dtype`, in one launch."""
    m, k = xq.shape
    n = q.shape[0]
    out = torch.empty(m, n, dtype=dtype, device=xq.device)
    grid = (triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n),)
    with on_device(xq.device):
        _int8_gemm_kernel[grid](xq, q, x_scale, scale, out, m, n, xq.stride(0), q.stride(0), out.stride(0), K=k,
                                BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                                GROUP_M=config.group_m, num_warps=config.num_warps, num_stages=config.num_stages)
    return out
