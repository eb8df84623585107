"""Calibration: plausible ceilings on CPU, H200-range ceilings on a GPU, the spec-table fallback."""
from __future__ import annotations

import pytest
import torch

from runners.telemetry.calibrate import calibrate, spec_sheet


def test_cpu_calibration_is_positive_and_plausible() -> None:
    result = calibrate(torch.device("cpu"), torch.float32)
    assert result["source"] == "measured" and result["dtype"] == "float32"
    assert 1e8 < result["copy_bytes_per_s"] < 1e12
    assert 1e8 < result["matmul_flops_per_s"] < 1e14
    assert result["key"] == f"{result['device']}|-|float32"
    assert set(result) == {"device", "dtype", "copy_bytes_per_s", "matmul_flops_per_s", "source", "key"}


@pytest.mark.parametrize("name,dtype,bandwidth,flops", [
    ("NVIDIA H200", "bfloat16", 4.8e12, 989e12),
    ("NVIDIA H100 80GB HBM3", "bfloat16", 3.35e12, 989e12),
    ("NVIDIA H100 PCIe", "float16", 2.0e12, 756e12),
    ("NVIDIA A100-SXM4-80GB", "float32", 2.039e12, 19.5e12),
    ("NVIDIA L40S", "bfloat16", 864e9, 362e12),
    ("NVIDIA L4", "bfloat16", 300e9, 121e12),
    ("NVIDIA GeForce RTX 4090", "bfloat16", 1008e9, 165e12),
])
def test_spec_sheet_matches_the_most_specific_name(name: str, dtype: str, bandwidth: float, flops: float) -> None:
    entry = spec_sheet(name, dtype)
    assert entry is not None and entry["source"] == "spec-table"
    assert (entry["copy_bytes_per_s"], entry["matmul_flops_per_s"]) == (bandwidth, flops)


def test_spec_sheet_knows_what_it_does_not_know() -> None:
    assert spec_sheet("Tesla T4", "bfloat16") is None  # no bf16 tensor cores
    assert spec_sheet("Some Future GPU", "bfloat16") is None


@pytest.mark.gpu
def test_gpu_calibration_in_h200_range() -> None:
    result = calibrate(torch.device("cuda"), torch.bfloat16)
    assert result["source"] == "measured"
    assert result["key"].startswith(torch.cuda.get_device_name() + "|")
    if "H200" not in result["device"]:
        pytest.skip(f"H200 ranges do not apply to {result['device']}")
    # data sheet: 4.8 TB/s, 989 TFLOP/s dense bf16; a copy reaches ~75–90 % of it, a big matmul 50–95 %
    assert 3.0e12 < result["copy_bytes_per_s"] < 4.8e12
    assert 4.0e14 < result["matmul_flops_per_s"] < 1.0e15
