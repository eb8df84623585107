"""Per-output-channel weight quantisation (fp8 e4m3, int8) and the linear op that reads it.

Each row of a weight matrix [out, in] gets one float32 scale = row amax / the format's largest
value, so the row's largest element maps to the format's edge and no row's range is set by another
row's outlier. `linear()` takes either a plain tensor (F.linear) or a `QuantWeight`, whose product
runs as one opaque op (`batchscope::quant_matmul`), so torch.compile and CUDA graphs take it whole
and the kernel is chosen by the row count at run time without a recompile:

- on CUDA, up to `tensor_core_rows` rows: `quant_kernels.w8_matmul`, a Triton kernel that streams the
  one-byte weights and keeps activations bfloat16 (weight-only; the small-batch, memory-bound case);
- above that: each activation row is scaled by its own amax to the weights' format and the product
  runs on one-byte tensor cores: fp8 through `torch._scaled_mm` (scale_a [M, 1] per token, scale_b
  [1, N] per channel, float32), int8 through our Triton int8 GEMM (`int8_gemm`, scales in its store) or
  `torch._int_mm` and a scale epilogue, whichever setup measured faster at that row count. fp8 and int8
  switch above TENSOR_CORE_ROWS, fp8-dynamic at every row count;
- on CPU up to the switch: dequantise, then F.linear — correct, not faster.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from runners.engines.quant_layout import DIMENSION_MULTIPLE

if TYPE_CHECKING:  # int8_gemm imports Triton, which CPU builds of torch need not have
    from runners.engines.kernels.int8_gemm import GemmConfig

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)  # 448
INT8_MAX = 127.0
TINY = 1e-12  # floor on an amax, so an all-zero row gets a finite scale instead of 0/0
TENSOR_CORE_ROWS = 16  # fp8 and int8: where one-byte tensor cores start to beat streaming weights on the H200
                       # (docs/quantisation.md)
FAST_ACCUMULATION = True  # measured: no error difference at K up to 14 336, and faster (docs/quantisation.md)


class QuantWeight(NamedTuple):
    """A quantised matrix: w[i, :] ≈ q[i, :] * scale[i]. A NamedTuple so torch.compile takes it as an
    argument of the one compiled layer (`tensor_core_rows` is a constant the graph specialises on)."""

    q: Tensor  # [out, in] float8_e4m3fn or int8, contiguous
    scale: Tensor  # [out] float32
    tensor_core_rows: int  # products with more rows quantise activations too and run on one-byte tensor cores


def quantize(w: Tensor, dtype: str) -> QuantWeight:
    """Quantise a [out, in] matrix to `dtype` ("fp8", "fp8-dynamic" or "int8") per output channel."""
    multiple = DIMENSION_MULTIPLE.get(dtype)
    if multiple is None:
        raise ValueError(f"no quantisation for dtype {dtype!r}")
    if w.shape[0] % multiple or w.shape[1] % multiple:
        product = "torch._int_mm" if dtype == "int8" else "torch._scaled_mm"
        raise ValueError(f"{dtype} needs weight dimensions divisible by {multiple} ({product}), got {tuple(w.shape)}")
    w32 = w.detach().float()
    amax = w32.abs().amax(dim=1).clamp(min=TINY)
    if dtype == "int8":
        scale = amax / INT8_MAX
        q = torch.round(w32 / scale[:, None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    else:
        scale = amax / FP8_MAX
        q = (w32 / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)  # e4m3fn has no inf: clamp first
    rows = 0 if dtype == "fp8-dynamic" else TENSOR_CORE_ROWS
    return QuantWeight(q.contiguous(), scale.contiguous(), rows)


def dequantize(w: QuantWeight, dtype: torch.dtype = torch.float32) -> Tensor:
    """The matrix the quantised one stands for, in `dtype`."""
    return (w.q.float() * w.scale[:, None]).to(dtype)


def linear(x: Tensor, w: Tensor | QuantWeight, bias: Tensor | None = None) -> Tensor:
    """x @ wᵀ (+ bias) for a plain or a quantised weight; the output has x's dtype."""
    if isinstance(w, Tensor):
        return F.linear(x, w, bias)
    rows = x.reshape(-1, x.shape[-1])
    out = torch.ops.batchscope.quant_matmul(rows, w.q, w.scale, w.tensor_core_rows)
    out = out.reshape(*x.shape[:-1], out.shape[-1])
    return out if bias is None else out + bias


TRITON, DEQUANTISE = "triton w8a16", "dequantise + F.linear"
FP8_TENSOR_CORES, INT8_TENSOR_CORES = "scaled_mm fp8 activations", "int_mm int8 activations"
TRITON_INT8_TENSOR_CORES = "triton int8 activations"


def kernel_for(rows: int, tensor_core_rows: int, on_cuda: bool, weight: Tensor) -> str:
    """Which kernel an M-row product with this weight runs (named in model.json's accuracy checks)."""
    if rows > tensor_core_rows:
        if weight.dtype == FP8:
            return FP8_TENSOR_CORES
        return TRITON_INT8_TENSOR_CORES if on_cuda and _int8_config(rows, weight) else INT8_TENSOR_CORES
    return TRITON if on_cuda else DEQUANTISE


def _int8_config(rows: int, q: Tensor) -> GemmConfig | None:
    """Setup's choice of the Triton int8 GEMM's tiles for this product, None for `_int_mm` (CUDA only)."""
    from runners.engines.kernels import int8_gemm  # Triton: CUDA builds of torch ship it; CPU ones need not
    return int8_gemm.config_for(rows, *q.shape)


@torch.library.custom_op("batchscope::quant_matmul", mutates_args=())
def quant_matmul(x: Tensor, q: Tensor, scale: Tensor, tensor_core_rows: int) -> Tensor:
    """x [M, K] @ (q [N, K] × scale [N])ᵀ in x's dtype, by the kernel the row count calls for."""
    kernel = kernel_for(x.shape[0], tensor_core_rows, x.is_cuda, q)
    if kernel == FP8_TENSOR_CORES:
        return _fp8_activations(x, q, scale)
    if kernel in (INT8_TENSOR_CORES, TRITON_INT8_TENSOR_CORES):
        xq, x_scale = quantize_rows(x, torch.int8)
        config = _int8_config(x.shape[0], q) if kernel == TRITON_INT8_TENSOR_CORES else None
        return int8_product(xq, x_scale, q, scale, x.dtype, config)
    if kernel == TRITON:
        from runners.engines.kernels import quant_kernels  # Triton: CUDA builds of torch ship it; CPU ones need not
        return quant_kernels.w8_matmul(x.contiguous(), q, scale)
    return (F.linear(x, q.to(x.dtype)) * scale).to(x.dtype)


@quant_matmul.register_fake
def _(x: Tensor, q: Tensor, scale: Tensor, tensor_core_rows: int) -> Tensor:
    return x.new_empty(x.shape[0], q.shape[0])


def _fp8_activations(x: Tensor, q: Tensor, scale: Tensor) -> Tensor:
    """Per-token fp8 activations × per-channel fp8 weights on fp8 tensor cores.

    `_scaled_mm` wants the first operand row-major and the second column-major (q.t() of the
    contiguous [out, in] q is), in and out divisible by 16 (checked at quantisation), any M. On a GPU
    the activations are quantised by one Triton kernel; on CPU by the same arithmetic in torch ops.
    """
    xq, x_scale = quantize_rows(x, FP8)
    return torch._scaled_mm(xq, q.t(), scale_a=x_scale, scale_b=scale[None, :], out_dtype=x.dtype,
                            use_fast_accum=FAST_ACCUMULATION)


def int8_product(xq: Tensor, x_scale: Tensor, q: Tensor, scale: Tensor, dtype: torch.dtype,
                 config: GemmConfig | None = None) -> Tensor:
    """Per-token int8 activations (xq, x_scale [M, 1]) × per-channel int8 weights on int8 tensor cores, in
    `dtype`: the Triton GEMM with `config` (an `int8_gemm.GemmConfig`), else `torch._int_mm` (more than 16
    rows, sizes divisible by 8; int32 out) and both scales in one epilogue."""
    if config is not None:
        from runners.engines.kernels import int8_gemm
        return int8_gemm.matmul(xq, x_scale, q, scale, dtype, config)
    acc = torch._int_mm(xq, q.t())
    if xq.is_cuda:
        from runners.engines.kernels import quant_kernels
        return quant_kernels.scale_int32(acc, x_scale, scale, dtype)
    return (acc.float() * x_scale * scale).to(dtype)


def choose_int8_gemm(weights: list[tuple[Tensor, Tensor]], x_dtype: torch.dtype) -> list[GemmConfig | None]:
    """Setup's choice, per row bucket, between the Triton int8 GEMM's tiles and `_int_mm` for one matrix's
    copies (`int8_gemm.choose`, given this module's activation quantisation and `_int_mm` path)."""
    from runners.engines.kernels import int8_gemm
    return int8_gemm.choose(weights, x_dtype, lambda x: quantize_rows(x, torch.int8), int8_product)


def quantize_rows(x: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Each activation row scaled by its own amax to fp8 or int8: (q, scale [M, 1] float32). On a GPU one
    Triton kernel; on CPU the same arithmetic in torch ops."""
    qmax = FP8_MAX if dtype == FP8 else INT8_MAX
    if x.is_cuda:
        from runners.engines.kernels import quant_kernels
        return quant_kernels.quantize_rows(x.contiguous(), dtype, qmax, TINY)
    x_scale = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=TINY) / qmax
    scaled = (x.float() / x_scale).clamp(-qmax, qmax)
    return (scaled.to(FP8) if dtype == FP8 else torch.round(scaled).to(torch.int8)), x_scale
