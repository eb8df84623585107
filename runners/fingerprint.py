"""The environment fingerprint stored with every run: runs are only compared with this visible."""
from __future__ import annotations

import platform
import socket
import sys
from typing import Any

import torch
import transformers

from runners.calibrate import device_name, driver_version
from runners.telemetry import pynvml


def total_ram() -> int:
    with open("/proc/meminfo") as f:
        return int(f.readline().split()[1]) * 1024


def collect(device: torch.device, engine_version: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "device": str(device), "host": socket.gethostname(), "python": sys.version.split()[0],
        "torch": torch.__version__, "transformers": transformers.__version__,
        "cuda": torch.version.cuda, "platform": platform.platform(), "cpu": device_name(torch.device("cpu")),
        "cpu_count": torch.get_num_threads(), "ram_bytes": total_ram(), "engine": engine_version,
        "gpu": None, "gpu_memory_bytes": None, "driver": None, "gpu_count": torch.cuda.device_count(),
        "compute_capability": None, "nvml": pynvml is not None,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, gpu_memory_bytes=props.total_memory,
                   compute_capability=f"{props.major}.{props.minor}")
        env["driver"] = driver_version()
    return env

