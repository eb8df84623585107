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
from runners.engines.kernels import quant, quant_kernels
torch.manual_seed(0)
worst = 0.0
for dtype in ("int8", "fp8"):
    for rows, out, inner in [(1, 48, 96), (3, 64, 320), (17, 80, 128), (40, 208, 272), (130, 144, 64)]:
        qw = quant.quantize(torch.randn(out, inner) * 0.02, dtype)  # fp8 needs sizes divisible by 16
        x = torch.randn(rows, inner, dtype=torch.float16)
        ref = x.float() @ quant.dequantize(qw).T
        for config in [quant_kernels.DEFAULT, quant_kernels.TileConfig(32, 64, 128, 4, 3),
                       quant_kernels.TileConfig(64, 16, 64, 4, 3)]:
            got = quant_kernels.w8_matmul(x, qw.q, qw.scale, config)
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
