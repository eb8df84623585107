"""Quantised weights on a CUDA GPU: the compiled, graph-captured engine and the _scaled_mm path.

Bounds: on random N(0, 0.02) weights the CPU runs measure last-position logits errors of 0.8 %
(int8) and 2.2 % (fp8, tiny preset); e4m3 keeps 3 mantissa bits (≤ 6 % per element, ~2-3 % rms),
int8 per-channel ~1 % rms of a weight. A bound of 3× the expected error (int8 0.03, fp8 0.08,
fp8-dynamic 0.10 because activations are rounded to e4m3 too) passes honest kernels and fails a
wrong scale or layout, which the CPU test shows gives > 30 %.
"""
from __future__ import annotations

import pytest
import torch

from runners import devices, models, quant
from runners.engines.base import Batch
from runners.engines.fast import FastEngine

BOUNDS = {"int8": 0.03, "fp8": 0.08, "fp8-dynamic": 0.10}
pytestmark = pytest.mark.gpu


def fp8_gpu() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= devices.FP8_CAPABILITY


@pytest.mark.parametrize("dtype", sorted(BOUNDS))
def test_compiled_graph_engine_logits_error_vs_bf16(dtype: str) -> None:
    if dtype.startswith("fp8") and not fp8_gpu():
        pytest.skip("needs compute capability ≥ 8.9")
    loaded = models.load("llama-3.2-1b", dtype, torch.device("cuda"))
    engine = FastEngine(loaded)
    assert engine.facts()["quant_logits_rel_error"] < BOUNDS[dtype]
    assert engine.facts()["weight_bytes"] == models.describe("llama-3.2-1b", loaded.config, dtype).weight_bytes
    gen = engine.generate(Batch(prompt_ids=[[5] * 40, [7] * 33, [9] * 40], output_lens=[8, 8, 8]))
    assert engine.graph is not None and len(gen.tokens[0]) == 8  # compiled + captured decode ran


@pytest.mark.parametrize("rows", [1, 3, 16, 17, 256])
def test_scaled_mm_path_matches_dequantised_reference(rows: int) -> None:
    if not fp8_gpu():
        pytest.skip("needs compute capability ≥ 8.9")
    w = torch.randn(4096, 1024, device="cuda") * 0.02
    x = torch.randn(rows, 1024, device="cuda", dtype=torch.bfloat16)
    qw = quant.quantize(w, "fp8-dynamic")
    ref = x.float() @ quant.dequantize(qw).T
    for fn in (quant.linear, torch.compile(quant.linear, dynamic=True)):
        out = fn(x, qw)
        assert out.dtype == torch.bfloat16
        assert float((out.float() - ref).norm() / ref.norm()) < 0.06


def test_device_check_accepts_every_quantised_dtype_on_an_fp8_gpu() -> None:
    if not fp8_gpu():
        pytest.skip("needs compute capability ≥ 8.9")
    for dtype in BOUNDS:
        devices.check_dtype(torch.device("cuda"), dtype)
