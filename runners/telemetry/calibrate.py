"""Measured ceilings for the roofline: device-copy bandwidth and matmul rate in the run's dtype.

The matmul dtype is the one the run's compute-bound matmuls use: float8_e4m3fn for fp8 and
fp8-dynamic (their products over 16 rows run on fp8 tensor cores; `torch._scaled_mm` probe), bfloat16
for int8 (its int8 tensor-core products are not probed, so its compute floor is bfloat16's: an
overestimate where the step is compute-bound).

A roofline built from data-sheet numbers flatters or blames the engine by whatever the sheet is off
by (boost clocks, ECC, memory clocks), so the sweep measures both ceilings on the device it runs on
and falls back to the spec table only when the probe itself fails.
"""
from __future__ import annotations

import platform
import statistics
import time
from typing import Callable

import torch

try:
    import pynvml
except ImportError:  # the driver version is then written as "-"
    pynvml = None

GiB = 1024**3
MiB = 1024**2

# Dense (no sparsity) tensor-core rates and HBM/GDDR bandwidth from the vendors' data sheets.
# Matched by case-insensitive substring of the device name, first match wins, so the more specific
# names come first ("H100 NVL" before "H100", "L40S" before "L4").
SPEC_TABLE: dict[str, dict[str, float]] = {
    "H200": {"bytes_per_s": 4.8e12, "bfloat16": 989e12, "float16": 989e12, "float32": 67e12,
             "float8_e4m3fn": 1979e12},
    "H100 NVL": {"bytes_per_s": 3.9e12, "bfloat16": 835e12, "float16": 835e12, "float32": 60e12,
                 "float8_e4m3fn": 1670e12},
    "H100 PCIe": {"bytes_per_s": 2.0e12, "bfloat16": 756e12, "float16": 756e12, "float32": 51e12,
                  "float8_e4m3fn": 1513e12},
    "H100": {"bytes_per_s": 3.35e12, "bfloat16": 989e12, "float16": 989e12, "float32": 67e12,
             "float8_e4m3fn": 1979e12},
    "A100 80GB PCIe": {"bytes_per_s": 1.935e12, "bfloat16": 312e12, "float16": 312e12, "float32": 19.5e12},
    "A100-SXM4-80GB": {"bytes_per_s": 2.039e12, "bfloat16": 312e12, "float16": 312e12, "float32": 19.5e12},
    "A100": {"bytes_per_s": 1.555e12, "bfloat16": 312e12, "float16": 312e12, "float32": 19.5e12},
    "L40S": {"bytes_per_s": 864e9, "bfloat16": 362e12, "float16": 362e12, "float32": 91.6e12,
             "float8_e4m3fn": 733e12},
    "L4": {"bytes_per_s": 300e9, "bfloat16": 121e12, "float16": 121e12, "float32": 30.3e12,
           "float8_e4m3fn": 242e12},
    "A10G": {"bytes_per_s": 600e9, "bfloat16": 70e12, "float16": 70e12, "float32": 31.2e12},
    "A10": {"bytes_per_s": 600e9, "bfloat16": 125e12, "float16": 125e12, "float32": 31.2e12},
    "RTX 4090": {"bytes_per_s": 1008e9, "bfloat16": 165e12, "float16": 165e12, "float32": 82.6e12},
    "RTX 3090": {"bytes_per_s": 936e9, "bfloat16": 71e12, "float16": 71e12, "float32": 35.6e12},
    "V100": {"bytes_per_s": 900e9, "float16": 125e12, "float32": 15.7e12},
    "T4": {"bytes_per_s": 320e9, "float16": 65e12, "float32": 8.1e12},
}


class CalibrationError(RuntimeError):
    """The probe failed and the spec table has no entry for this device and dtype."""


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` → "bfloat16", the spelling of the spec and of calibration.json."""
    return str(dtype).removeprefix("torch.")


def spec_sheet(gpu_name: str, dtype: str) -> dict | None:
    """Data-sheet ceilings for a GPU name and dtype name, or None when the table does not know it."""
    for pattern, entry in SPEC_TABLE.items():
        if pattern.lower() in gpu_name.lower():
            if dtype not in entry:
                return None
            return {"device": gpu_name, "dtype": dtype, "copy_bytes_per_s": entry["bytes_per_s"],
                    "matmul_flops_per_s": entry[dtype], "source": "spec-table"}
    return None


def calibration_key(device_name: str, driver: str, dtype: str) -> str:
    """The cache key the app stores ceilings under: one device model, driver and dtype."""
    return f"{device_name}|{driver}|{dtype}"


def calibrate(device: torch.device, dtype: torch.dtype) -> dict:
    """The calibration.json dict for this device and dtype: measured, else the spec table."""
    name = device_name(device)
    driver = driver_version() if device.type == "cuda" else "-"
    dname = dtype_name(dtype)
    key = calibration_key(name, driver, dname)
    try:
        copy_rate, matmul_rate = _measure(device, dtype)
    except (RuntimeError, torch.OutOfMemoryError) as err:
        fallback = spec_sheet(name, dname) if device.type == "cuda" else None
        if fallback is None:
            raise CalibrationError(f"calibration failed on {name} ({dname}) and the spec table has "
                                   f"no entry for it: {err}") from err
        return {**fallback, "key": key}
    return {"device": name, "dtype": dname, "copy_bytes_per_s": copy_rate,
            "matmul_flops_per_s": matmul_rate, "source": "measured", "key": key}


def device_name(device: torch.device) -> str:
    """The GPU's marketing name, or the CPU model name from /proc/cpuinfo."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def driver_version() -> str:
    """The NVIDIA driver version through NVML, or "-" when NVML is absent."""
    if pynvml is None:
        return "-"
    try:
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except pynvml.NVMLError:
        return "-"


def _measure(device: torch.device, dtype: torch.dtype) -> tuple[float, float]:
    """(copy bytes/s, matmul FLOP/s): ~2 GiB copy and 8192³ matmul on CUDA, 256 MiB and 512³ on CPU.

    Copy bytes count both the read and the write, which is what a decode step's weight read is
    compared against. Float32 matmuls run under the process's TF32 setting, the same as the run's.
    The CPU matmul is 512³ because CPUs without half-precision units run float16 ~100× slower than
    float32, and the whole CPU probe must stay under about a second.
    """
    on_cuda = device.type == "cuda"
    copy_bytes = 1 * GiB if on_cuda else 256 * MiB
    n = 8192 if on_cuda else 512
    elem = torch.empty((), dtype=dtype).element_size()
    src = torch.ones(copy_bytes // elem, dtype=dtype, device=device)
    dst = torch.empty_like(src)
    copy_s = _median_seconds(lambda: dst.copy_(src), device)
    del src, dst
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    if dtype == torch.float8_e4m3fn:
        matmul_s = _median_seconds(_fp8_matmul(a, b), device)
    else:
        out = torch.empty(n, n, dtype=dtype, device=device)
        matmul_s = _median_seconds(lambda: torch.matmul(a, b, out=out), device)
        del out
    del a, b
    if on_cuda:
        torch.cuda.empty_cache()
    return 2 * copy_bytes / copy_s, 2 * n**3 / matmul_s


def _fp8_matmul(a: torch.Tensor, b: torch.Tensor) -> Callable[[], object]:
    """The fp8-dynamic engine's matmul: `_scaled_mm` with rowwise float32 scales, bfloat16 out
    (b.t() is the column-major second operand it wants)."""
    n = a.shape[0]
    scale_a = torch.ones((n, 1), device=a.device)
    scale_b = torch.ones((1, n), device=a.device)
    out = torch.empty(n, n, dtype=torch.bfloat16, device=a.device)
    return lambda: torch._scaled_mm(a, b.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16,
                                    use_fast_accum=True, out=out)


def _median_seconds(fn: Callable[[], object], device: torch.device) -> float:
    """Median duration of fn after warm-up: CUDA events on a GPU, perf_counter on CPU.

    The CPU loop stops after 0.3 s of measurement so a slow dtype (bf16 without AMX) stays short.
    """
    if device.type == "cuda":
        for _ in range(3):
            fn()
        torch.cuda.synchronize(device)
        times = []
        for _ in range(10):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)
    fn()
    times = []
    budget_end = time.perf_counter() + 0.3
    while len(times) < 5 and (not times or time.perf_counter() < budget_end):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
