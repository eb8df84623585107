"""Which device a sweep runs on, and whether it can run the chosen dtype (checked before anything runs)."""
from __future__ import annotations

import torch

from runners.engines.kernels import quant
from runners.engines.models import DTYPES
from runners.engines.quant_layout import QUANT_DTYPES
from runners.spec import SpecError

FP8_CAPABILITY = (8, 9)  # Ada (L4, L40S) and Hopper (H100, H200): fp8 tensor cores, Triton fp8 casts


def resolve(device: str) -> torch.device:
    """The sweep's device, always with an index on CUDA: rank r of a multi-GPU sweep runs on that
    index + r, and NCCL and `torch.cuda.set_device` need a numbered device. `auto` is GPU 0."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SpecError("device", "CUDA was asked for but no CUDA device is visible")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise SpecError("device", f"{device} does not exist ({torch.cuda.device_count()} CUDA device(s))")
        return torch.device("cuda", index)
    return torch.device("cpu")


def use(device: torch.device) -> None:
    """Make a CUDA device the process's current one, so the timing events, streams, CUDA graphs and
    Triton launches that take the current device land on the sweep's GPU (a sweep on cuda:1 that
    skipped this recorded its events on GPU 0 and timed nothing)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


def check_dtype(device: torch.device, dtype: str) -> None:
    """Run a small matmul in the dtype: the cheapest honest answer to 'can this device do it?'."""
    if DTYPES[dtype] == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise SpecError("dtype", f"{torch.cuda.get_device_name(device)} does not support bfloat16")
    if dtype in QUANT_DTYPES:
        _check_quant(device, dtype)
    try:
        a = torch.ones((16, 16), dtype=DTYPES[dtype], device=device)
        (a @ a).sum().item()
    except (RuntimeError, TypeError) as err:
        raise SpecError("dtype", f"{dtype} matmul does not run on {device}: {str(err).splitlines()[0]}") from None


def _check_quant(device: torch.device, dtype: str) -> None:
    """fp8 on CUDA needs compute capability ≥ 8.9; fp8-dynamic needs CUDA; fp8 weight-only runs on
    CPU through a dequantise-to-bfloat16 matmul (eager), int8 weight-only everywhere. Then one small
    quantised linear runs, so a missing kernel is caught here and not at the first sweep point."""
    if dtype.startswith("fp8") and device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if capability < FP8_CAPABILITY:
            raise SpecError("dtype", f"{dtype} needs a GPU with fp8 support (compute capability ≥ 8.9: "
                                     f"L4, L40S, H100, H200); {torch.cuda.get_device_name(device)} is "
                                     f"{capability[0]}.{capability[1]} — use int8 or bfloat16")
    if dtype == "fp8-dynamic" and device.type != "cuda":
        raise SpecError("dtype", "fp8-dynamic needs a CUDA GPU with fp8 matmul (compute capability ≥ 8.9); "
                                 "on CPU use fp8 (weight-only) or int8")
    try:
        x = torch.ones((4, 32), dtype=torch.bfloat16, device=device)
        quant.linear(x, quant.quantize(torch.ones((32, 32), device=device), dtype)).sum().item()
    except (RuntimeError, TypeError) as err:
        raise SpecError("dtype", f"{dtype} matmul does not run on {device}: {str(err).splitlines()[0]}") from None


def check_ranks(device: torch.device, ranks: int, field: str) -> None:
    """Every rank of a multi-process sweep needs its own GPU, counted from the sweep's device on."""
    if device.type == "cuda" and (device.index or 0) + ranks > torch.cuda.device_count():
        raise SpecError(field, f"{field} {ranks} needs GPUs {device.index or 0}..{(device.index or 0) + ranks - 1}, "
                               f"but {torch.cuda.device_count()} CUDA device(s) are visible")
