"""Per-output-channel weight quantisation (fp8 e4m3, int8) and the linear op that reads it.

Each row of a weight matrix [out, in] gets one float32 scale = row amax / the format's largest
value, so the row's largest element maps to the format's edge and no row's range is set by another
row's outlier. `linear()` takes either a plain tensor (F.linear) or a `QuantWeight`:

- weight-only (fp8, int8): `F.linear(x, q.to(x.dtype)) * scale` — the gpt-fast form that
  torch.compile on CUDA fuses into one kernel reading one byte per weight; on CPU (eager) it is a
  plain dequantise-then-matmul, correct but not faster.
- fp8-dynamic: each activation row is scaled to fp8 by its own amax at run time and the product runs
  on fp8 tensor cores through `torch._scaled_mm` with rowwise scales (scale_a [M, 1] per token,
  scale_b [1, N] per output channel, both float32), bfloat16 out.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)  # 448
INT8_MAX = 127.0
TINY = 1e-12  # floor on an amax, so an all-zero row gets a finite scale instead of 0/0


class QuantWeight(NamedTuple):
    """A quantised matrix: w[i, :] ≈ q[i, :] * scale[i]. A NamedTuple so torch.compile takes it as an
    argument of the one compiled layer (its `dynamic` flag is a constant the graph specialises on)."""

    q: Tensor  # [out, in] float8_e4m3fn or int8, contiguous
    scale: Tensor  # [out] float32
    dynamic: bool  # fp8 activations through torch._scaled_mm


def quantize(w: Tensor, dtype: str) -> QuantWeight:
    """Quantise a [out, in] matrix to `dtype` ("fp8", "fp8-dynamic" or "int8") per output channel."""
    w32 = w.detach().float()
    amax = w32.abs().amax(dim=1).clamp(min=TINY)
    if dtype == "int8":
        scale = amax / INT8_MAX
        q = torch.round(w32 / scale[:, None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    elif dtype in ("fp8", "fp8-dynamic"):
        if dtype == "fp8-dynamic" and (w.shape[0] % 16 or w.shape[1] % 16):
            raise ValueError(f"fp8-dynamic needs weight dimensions divisible by 16 (torch._scaled_mm), "
                             f"got {tuple(w.shape)}")
        scale = amax / FP8_MAX
        q = (w32 / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)  # e4m3fn has no inf: clamp first
    else:
        raise ValueError(f"no quantisation for dtype {dtype!r}")
    return QuantWeight(q.contiguous(), scale.contiguous(), dtype == "fp8-dynamic")


def dequantize(w: QuantWeight, dtype: torch.dtype = torch.float32) -> Tensor:
    """The matrix the quantised one stands for, in `dtype`."""
    return (w.q.float() * w.scale[:, None]).to(dtype)


def linear(x: Tensor, w: Tensor | QuantWeight, bias: Tensor | None = None) -> Tensor:
    """x @ wᵀ (+ bias) for a plain or a quantised weight; the output has x's dtype."""
    if isinstance(w, Tensor):
        return F.linear(x, w, bias)
    if w.dynamic:
        out = _fp8_dynamic(x, w)
    else:
        out = (F.linear(x, w.q.to(x.dtype)) * w.scale).to(x.dtype)
    return out if bias is None else out + bias


def _fp8_dynamic(x: Tensor, w: QuantWeight) -> Tensor:
    """Per-token fp8 activations × per-channel fp8 weights on fp8 tensor cores.

    `_scaled_mm` wants the first operand row-major and the second column-major (q.t() of the
    contiguous [out, in] q is), in and out divisible by 16 (checked at quantisation), any M.
    """
    rows = x.reshape(-1, x.shape[-1])
    x_scale = rows.abs().amax(dim=-1, keepdim=True).float().clamp(min=TINY) / FP8_MAX
    xq = (rows.float() / x_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    out = torch._scaled_mm(xq, w.q.t(), scale_a=x_scale, scale_b=w.scale[None, :], out_dtype=x.dtype,
                           use_fast_accum=True)
    return out.reshape(*x.shape[:-1], out.shape[-1])

