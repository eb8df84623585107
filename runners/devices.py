"""Which device a sweep runs on, and whether it can run the chosen dtype (checked before anything runs)."""
from __future__ import annotations

import torch

from runners.models import DTYPES
from runners.spec import SpecError


def resolve(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SpecError("device", "CUDA was asked for but no CUDA device is visible")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise SpecError("device", f"{device} does not exist ({torch.cuda.device_count()} CUDA device(s))")
        return torch.device("cuda", index)
    return torch.device("cpu")


def check_dtype(device: torch.device, dtype: str) -> None:
    """Run a small matmul in the dtype: the cheapest honest answer to 'can this device do it?'."""
    if dtype == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise SpecError("dtype", f"{torch.cuda.get_device_name(device)} does not support bfloat16")
    try:
        a = torch.ones((16, 16), dtype=DTYPES[dtype], device=device)
        (a @ a).sum().item()
    except (RuntimeError, TypeError) as err:
        raise SpecError("dtype", f"{dtype} matmul does not run on {device}: {str(err).splitlines()[0]}") from None
