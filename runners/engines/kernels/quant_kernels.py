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
tile the later ones find it in L2. One row (decode at batch 1) has its own kernel, picked by a config
whose block_m is 1: no padded tile and no tensor cores, a [BLOCK_N, BLOCK_K] product on the CUDA cores
summed over K at the end (docs/quantisation.md: 0.65 → 0.56–0.59× bfloat16's layer at one row).
The configuration is chosen per weight shape in setup (`choose`) and fixed after, so nothing is
benchmarked while a step is measured, and the row count is not specialised on, so one compile per
weight shape serves every row count. Triton ships with torch's CUDA builds.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
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
    split_k: int = 1  # K cut into this many ranges, one program each; the last to finish a tile sums them


# The engine runs this kernel up to quant.TENSOR_CORE_ROWS rows (one-byte tensor cores take over above),
# so one row tile of 16 covers it: weights are streamed once, in as many column blocks as keep every SM
# loading. Which width and depth does that best depends on the matrix and the GPU, so setup times
# CANDIDATES on the model's own weights (`choose`) and keeps the fastest per shape in CHOSEN.
DEFAULT = TileConfig(16, 32, 256, 4, 4)
# the fastest per 8B matrix in a 36-tile search on the H200 (docs/quantisation.md), and DEFAULT
# and split-K ones: a 4096-wide matrix in 32-column blocks is 128 programs, one a multiprocessor, too few
# loads in flight to reach the copy rate (int8 measured 2.6 TB/s of 4.3 on the 8B layer); split in K,
# each program streams a K range and the last of a tile's programs adds the ranges' partial sums.
CANDIDATES = (DEFAULT, TileConfig(16, 64, 512, 4, 3), TileConfig(16, 32, 1024, 4, 3), TileConfig(16, 64, 256, 4, 3),
              TileConfig(16, 32, 256, 4, 5), TileConfig(16, 32, 256, 4, 3), TileConfig(16, 64, 256, 4, 4),
              TileConfig(16, 16, 256, 4, 4), TileConfig(16, 32, 256, 4, 4, 2), TileConfig(16, 32, 256, 4, 4, 4),
              TileConfig(16, 64, 256, 4, 4, 4), TileConfig(16, 32, 512, 4, 3, 4), TileConfig(16, 64, 512, 4, 3, 8))
# One row (decode at batch 1) runs best without a 16-row tile: the one-row kernel (block_m 1) streams the
# weights through the CUDA cores. Setup times these beside CANDIDATES on one row and keeps the faster. They
# are the three fastest per 8B matrix and dtype of a 57-config search on the H200 (docs/quantisation.md).
ONE_ROW_CANDIDATES = (TileConfig(1, 8, 512, 8, 1), TileConfig(1, 16, 512, 8, 1), TileConfig(1, 8, 512, 4, 1),
                      TileConfig(1, 8, 1024, 4, 1), TileConfig(1, 16, 256, 4, 1), TileConfig(1, 32, 256, 8, 1),
                      TileConfig(1, 16, 512, 8, 1, 2), TileConfig(1, 32, 256, 8, 1, 4), TileConfig(1, 8, 1024, 4, 1, 4))


class Chosen(NamedTuple):
    """Setup's choice for one weight shape: the tile for 2…TENSOR_CORE_ROWS rows, and the config for one row."""

    rows: TileConfig
    one_row: TileConfig


CHOSEN: dict[tuple[int, int, torch.dtype], Chosen] = {}
TIMED_REPLAYS = 3
_ARRIVALS: dict[tuple[torch.device, int], Tensor] = {}  # per device and tile count: the split-K counters


def on_device(device: torch.device) -> contextlib.AbstractContextManager:
    """Triton launches on the current CUDA device, which need not be the tensors' (a sweep on cuda:1);
    the CPU interpreter has none."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def config_for(n: int, k: int, dtype: torch.dtype, rows: int) -> TileConfig:
    """The configuration for a `rows`-row product with an [N, K] weight of `dtype`: the one setup chose for
    one row or for more, else DEFAULT."""
    chosen = CHOSEN.get((n, k, dtype))
    if chosen is None:
        return DEFAULT
    return chosen.one_row if rows == 1 else chosen.rows


def graph_replay_ms(fn: Callable[[], object], replays: int) -> list[float]:
    """ms of each of `replays` replays of one CUDA graph of `fn` on the current device, after one run
    of `fn` on a side stream (which compiles what it launches, as capture requires)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return replay_times_ms(graph, replays)


def replay_times_ms(graph: torch.cuda.CUDAGraph, replays: int) -> list[float]:
    """ms of each of `replays` replays of a captured graph, each timed alone by CUDA events (`fast.replay_ms`
    is the decode step's: it resets the rows' positions before each replay and returns the median)."""
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def choose(weights: list[tuple[Tensor, Tensor]], x_dtype: torch.dtype) -> Chosen:
    """Time every candidate on one-row products with each of `weights` (all the layers' copies of one
    matrix: more bytes than L2 holds, as in a decode step), each candidate as one CUDA graph, its best
    of TIMED_REPLAYS replays; keep and return the fastest tile (for up to TENSOR_CORE_ROWS rows: a tile
    streams the weights once whatever its row count) and the fastest of all for one row. Runs in setup,
    compiles included."""
    q0 = weights[0][0]
    with on_device(q0.device):
        x = torch.randn(1, q0.shape[1], dtype=x_dtype, device=q0.device)
        timed = {config: min(graph_replay_ms(lambda: [w8_matmul(x, q, s, config) for q, s in weights], TIMED_REPLAYS))
                 for config in CANDIDATES + ONE_ROW_CANDIDATES}
    chosen = Chosen(min(CANDIDATES, key=timed.__getitem__), min(timed, key=timed.__getitem__))
    CHOSEN[(q0.shape[0], q0.shape[1], q0.dtype)] = chosen
    return chosen


@triton.jit
def _store_tile(acc, rows, cols, M, N, stride_om, scale_ptr, out_ptr, partial_ptr, arrivals_ptr, tile, pid_k, width,
                SPLIT_K: tl.constexpr):
    """Scale a [rows, cols] float32 tile by its columns' scales and store it; split in K, the partial sums
    [SPLIT_K, width, N] wait until the program arriving last at the tile's counter (acq_rel, after a barrier:
    the CTA's stores are published first) adds them, stores, and resets the counter."""
    out_mask = (rows[:, None] < M) & (cols[None, :] < N)
    if SPLIT_K > 1:
        here = partial_ptr + rows[:, None] * N + cols[None, :]
        tl.store(here + pid_k * width * N, acc, mask=cols[None, :] < N)
        tl.debug_barrier()
        if tl.atomic_add(arrivals_ptr + tile, 1) == SPLIT_K - 1:
            acc = tl.zeros(acc.shape, dtype=tl.float32)
            for split in tl.static_range(SPLIT_K):
                acc += tl.load(here + split * width * N, mask=cols[None, :] < N, other=0.0, cache_modifier=".cg")
            scale = tl.load(scale_ptr + cols, mask=cols < N, other=0.0)
            tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :],
                     (acc * scale[None, :]).to(out_ptr.dtype.element_ty), mask=out_mask)
            tl.atomic_xchg(arrivals_ptr + tile, 0)
    else:
        scale = tl.load(scale_ptr + cols, mask=cols < N, other=0.0)
        tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :],
                 (acc * scale[None, :]).to(out_ptr.dtype.element_ty), mask=out_mask)


@triton.jit(do_not_specialize=["M"])
def _w8_matmul_kernel(x_ptr, w_ptr, scale_ptr, out_ptr, partial_ptr, arrivals_ptr, M, N, stride_xm, stride_wn,
                      stride_om, K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, DOT_F16: tl.constexpr, SPLIT_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    steps: tl.constexpr = (K + BLOCK_K - 1) // BLOCK_K
    per_split: tl.constexpr = (steps + SPLIT_K - 1) // SPLIT_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in range(0, per_split):  # the last range's overshoot past K is masked
        k = (pid_k * per_split + i) * BLOCK_K + ks
        x = tl.load(x_ptr + rows[:, None] * stride_xm + k[None, :],
                    mask=(rows[:, None] < M) & (k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + cols[:, None] * stride_wn + k[None, :],
                    mask=(cols[:, None] < N) & (k[None, :] < K), other=0.0)
        if DOT_F16:
            acc = tl.dot(x.to(tl.float16), tl.trans(w.to(tl.float16)), acc)
        else:
            acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
    _store_tile(acc, rows, cols, M, N, stride_om, scale_ptr, out_ptr, partial_ptr, arrivals_ptr,
                pid_m * tl.num_programs(1) + pid_n, pid_k, tl.num_programs(0) * BLOCK_M, SPLIT_K)


@triton.jit(do_not_specialize=["M"])
def _w8_gemv_kernel(x_ptr, w_ptr, scale_ptr, out_ptr, partial_ptr, arrivals_ptr, M, N, stride_xm, stride_wn,
                    stride_om, K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
                    EVEN: tl.constexpr, W_INT8: tl.constexpr):
    """One row per program row (grid axis 0), no tensor cores: each program multiplies a [BLOCK_N, BLOCK_K]
    weight tile by the row's K slice on the CUDA cores and sums over K once at the end, so no tile is padded
    to 16 rows and nothing waits on a matrix instruction between loads. EVEN: no edge in N or K, no masks."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    steps: tl.constexpr = (K + BLOCK_K - 1) // BLOCK_K
    per_split: tl.constexpr = (steps + SPLIT_K - 1) // SPLIT_K
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for i in range(0, per_split):
        k = (pid_k * per_split + i) * BLOCK_K + ks
        if EVEN:
            x = tl.load(x_ptr + pid_m * stride_xm + k)
            w = tl.load(w_ptr + cols[:, None] * stride_wn + k[None, :])
        else:
            x = tl.load(x_ptr + pid_m * stride_xm + k, mask=k < K, other=0.0)
            w = tl.load(w_ptr + cols[:, None] * stride_wn + k[None, :], mask=(cols[:, None] < N) & (k[None, :] < K),
                        other=0.0)
        if W_INT8:  # v + 2²³ + 128 read as float32 bits, minus 2²³ + 128: a sign extension, an integer add and a
            # float subtraction, no I2F, which runs at a quarter of their rate on Hopper and bounded int8 at ≈ 2 TB/s
            # here (docs/quantisation.md)
            w = (w.to(tl.int32) + 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    rows = pid_m + tl.zeros((1,), dtype=tl.int32)
    _store_tile(tl.sum(acc, axis=1)[None, :], rows, cols, M, N, stride_om, scale_ptr, out_ptr, partial_ptr,
                arrivals_ptr, pid_m * tl.num_programs(1) + pid_n, pid_k, tl.num_programs(0), SPLIT_K)


def _arrivals(device: torch.device, tiles: int) -> Tensor:
    """The split-K arrival counters for a grid of `tiles` tiles: zeros, made once (in setup, when `choose`
    first runs the shape) and left at zero by every launch's last programs."""
    if (device, tiles) not in _ARRIVALS:
        _ARRIVALS[(device, tiles)] = torch.zeros(tiles, dtype=torch.int32, device=device)
    return _ARRIVALS[(device, tiles)]


def w8_matmul(x: Tensor, q: Tensor, scale: Tensor, config: TileConfig | None = None,
              dot_f16: bool | None = None) -> Tensor:
    """x [M, K] (bfloat16/float16, unit stride in K) @ q [N, K]ᵀ (int8 or float8_e4m3fn) × scale [N], by the
    tile kernel, or by the one-row kernel when the config's block_m is 1 (any M is right; past one row it
    reads the weights once a row). `dot_f16` (default: for fp8 weights) makes the tile kernel multiply in
    float16; bench/quant_kernels.py times both."""
    m, k = x.shape
    n = q.shape[0]
    c = config or config_for(n, k, q.dtype, m)
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, c.block_m), triton.cdiv(n, c.block_n), c.split_k)
    if c.split_k > 1:
        partial = torch.empty(c.split_k, grid[0] * c.block_m, n, dtype=torch.float32, device=x.device)
        arrivals = _arrivals(x.device, grid[0] * grid[1])
    else:
        partial = arrivals = out  # not read: the one-range kernel stores its tile directly
    args = (x, q, scale, out, partial, arrivals, m, n, x.stride(0), q.stride(0), out.stride(0))
    with on_device(x.device):
        if c.block_m == 1:
            _w8_gemv_kernel[grid](*args, K=k, BLOCK_N=c.block_n, BLOCK_K=c.block_k, SPLIT_K=c.split_k,
                                  EVEN=n % c.block_n == 0 and k % (c.block_k * c.split_k) == 0,
                                  W_INT8=q.dtype == torch.int8,
                                  num_warps=c.num_warps, num_stages=c.num_stages)
        else:
            _w8_matmul_kernel[grid](*args, K=k, BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k,
                                    DOT_F16=q.dtype == torch.float8_e4m3fn if dot_f16 is None else dot_f16,
                                    SPLIT_K=c.split_k, num_warps=c.num_warps, num_stages=c.num_stages)
    return out


@triton.jit
def _quantize_rows_kernel(x_ptr, q_ptr, scale_ptr, stride_xm, K: tl.constexpr, BLOCK_K: tl.constexpr,
                          QMAX: tl.constexpr, TINY: tl.constexpr, ROUND: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # row × K passes 2³¹ in a long static prefill
    ks = tl.arange(0, BLOCK_K)
    x = tl.load(x_ptr + row * stride_xm + ks, mask=ks < K, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.max(tl.abs(x), axis=0), TINY) / QMAX
    tl.store(scale_ptr + row, scale)
    q = tl.minimum(tl.maximum(x / scale, -QMAX), QMAX)
    if ROUND:  # to the nearest integer, halves away from zero (torch.round takes them to even: rarely differs)
        q = tl.where(q >= 0, tl.floor(q + 0.5), tl.ceil(q - 0.5))
    tl.store(q_ptr + row * K + ks, q.to(q_ptr.dtype.element_ty), mask=ks < K)


def quantize_rows(x: Tensor, dtype: torch.dtype, qmax: float, tiny: float) -> tuple[Tensor, Tensor]:
    """Each row of x [M, K] scaled by its own amax to `dtype` (float8_e4m3fn or int8): (q [M, K],
    scale [M, 1] float32), in one launch (as separate torch ops it was seven, which cost more than the
    one-byte product saved)."""
    m, k = x.shape
    q = torch.empty(m, k, dtype=dtype, device=x.device)
    scale = torch.empty(m, 1, dtype=torch.float32, device=x.device)
    block = triton.next_power_of_2(k)
    with on_device(x.device):
        _quantize_rows_kernel[(m,)](x, q, scale, x.stride(0), K=k, BLOCK_K=block, QMAX=qmax, TINY=tiny,
                                    ROUND=dtype == torch.int8, num_warps=max(4, min(16, block // 1024)))
    return q, scale


@triton.jit
def _scale_int32_kernel(acc_ptr, x_scale_ptr, w_scale_ptr, out_ptr, total, N, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # M × N passes 2³¹ in a long prefill
    inside = idx < total
    acc = tl.load(acc_ptr + idx, mask=inside, other=0).to(tl.float32)
    x_scale = tl.load(x_scale_ptr + idx // N, mask=inside, other=0.0)
    w_scale = tl.load(w_scale_ptr + idx % N, mask=inside, other=0.0)
    tl.store(out_ptr + idx, (acc * x_scale * w_scale).to(out_ptr.dtype.element_ty), mask=inside)


def scale_int32(acc: Tensor, x_scale: Tensor, w_scale: Tensor, dtype: torch.dtype) -> Tensor:
    """acc [M, N] int32 × x_scale [M, 1] × w_scale [N] in `dtype`: torch._int_mm's epilogue, one launch."""
    out = torch.empty(acc.shape, dtype=dtype, device=acc.device)
    block = 1024
    with on_device(acc.device):
        _scale_int32_kernel[(triton.cdiv(acc.numel(), block),)](acc, x_scale, w_scale, out, acc.numel(),
                                                               acc.shape[1], BLOCK=block)
    return out
