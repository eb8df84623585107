"""The Triton kernel's indexing, masks and scales, run by Triton's CPU interpreter (no GPU needed).

The interpreter executes the kernel body with numpy, one program at a time, so tile configs and every
edge (rows, columns and K not multiples of the block) is checked here; the GPU tests time and check the
compiled kernel. The interpreter has no bfloat16 arithmetic, so activations are float16 here.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

REPO = Path(__file__).resolve().parents[1]
SCRIPT = """
import torch
from runners.engines.kernels import int8_gemm, quant, quant_kernels
torch.manual_seed(0)
worst = 0.0
# the one-row kernel (a program per row: few rows here, the interpreter is slow): an edge in N, edges in K with
# split-K, and no edge at all (EVEN: no masks)
ONE_ROW = [quant_kernels.TileConfig(1, 32, 32, 4, 1), quant_kernels.TileConfig(1, 16, 64, 4, 1, 3),
           quant_kernels.TileConfig(1, 16, 16, 4, 1, 2)]
for dtype in ("int8", "fp8"):
    for rows, out, inner in [(1, 48, 96), (3, 64, 320), (17, 80, 128), (40, 208, 272), (130, 144, 64)]:
        qw = quant.quantize(torch.randn(out, inner) * 0.02, dtype)  # fp8 needs sizes divisible by 16
        x = torch.randn(rows, inner, dtype=torch.float16)
        ref = x.float() @ quant.dequantize(qw).T
        for config in ([quant_kernels.DEFAULT, quant_kernels.TileConfig(32, 64, 128, 4, 3),
                       quant_kernels.TileConfig(64, 16, 64, 4, 3), quant_kernels.TileConfig(16, 32, 64, 4, 3, 2),
                       quant_kernels.TileConfig(16, 16, 32, 4, 3, 3)]  # split-K: K ranges of unequal length
                       + ONE_ROW * (rows <= 17)):
            got = quant_kernels.w8_matmul(x, qw.q, qw.scale, config)
            assert got.dtype == torch.float16 and got.shape == (rows, out)
            worst = max(worst, float((got.float() - ref).norm() / ref.norm()))
for rows, out, inner in [(17, 48, 96), (40, 80, 272)]:  # the int8 GEMM: row, column and K edges
    qw = quant.quantize(torch.randn(out, inner) * 0.02, "int8")
    x = torch.randn(rows, inner, dtype=torch.float16)
    xq, x_scale = quant.quantize_rows(x, torch.int8)
    ref = (xq.float() * x_scale) @ quant.dequantize(qw).T
    for config in [int8_gemm.GemmConfig(16, 32, 32, 2, 4, 2), int8_gemm.GemmConfig(32, 16, 64, 1, 4, 2)]:
        got = int8_gemm.matmul(xq, x_scale, qw.q, qw.scale, torch.float16, config)
        assert got.dtype == torch.float16 and got.shape == (rows, out)
        worst = max(worst, float((got.float() - ref).norm() / ref.norm()))
x = torch.randn(5, 272, dtype=torch.float16) * torch.logspace(-3, 3, 5, dtype=torch.float16)[:, None]
q, scale = quant_kernels.quantize_rows(x, quant.FP8, quant.FP8_MAX, quant.TINY)
want_scale = x.float().abs().amax(dim=-1, keepdim=True) / quant.FP8_MAX
want_q = (x.float() / want_scale).clamp(-quant.FP8_MAX, quant.FP8_MAX).to(quant.FP8)
assert torch.allclose(scale, want_scale, rtol=1e-6)
# the interpreter's float32→e4m3 emulation rounds a mantissa carry down (31.4 → 16, not 32), about 2 % of
# these values; the GPU test holds the hardware conversion to the torch ops exactly
assert (q.float() == want_q.float()).float().mean() > 0.95, "fp8 rows differ from the torch ops"
print(worst)
"""


def test_kernels_match_the_dequantised_product_and_the_torch_row_quantisation() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.strip()) < 2e-3  # float16 output rounding (2⁻¹¹ relative) and nothing more


def test_int8_gemm_takes_the_choice_of_the_largest_row_bucket_at_or_below_the_row_count() -> None:
    from runners.engines.kernels import int8_gemm
    small, mid, large = int8_gemm.CANDIDATES[:3]
    assert int8_gemm.ROW_BUCKETS == (32, 64, 128, 256, 512, 1024, 2048)
    int8_gemm.CHOSEN[(8, 16)] = [None, None, small, small, mid, mid, large]
    try:
        got = [int8_gemm.config_for(rows, 8, 16) for rows in (17, 32, 127, 128, 511, 512, 2047, 2048, 9000)]
        assert got == [None, None, None, small, small, mid, mid, large, large]
        assert int8_gemm.config_for(300, 16, 8) is None  # a shape setup never timed: `_int_mm`, as before
    finally:
        int8_gemm.CHOSEN.pop((8, 16))
