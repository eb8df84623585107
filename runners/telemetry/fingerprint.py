"""The environment fingerprint stored with every run: runs are only compared with this visible."""
from __future__ import annotations

import platform
import re
import shutil
import socket
import subprocess
import sys
from typing import Any

import torch
import transformers

from runners.metrics import loaded
from runners.telemetry.calibrate import device_name, driver_version
from runners.telemetry.telemetry import pynvml


def total_ram() -> int:
    with open("/proc/meminfo") as f:
        return int(f.readline().split()[1]) * 1024


def topology() -> str | None:
    """`nvidia-smi topo -m` as one `GPU0-GPU1 NV18` link per GPU pair; None without nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        text = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return summarise_topology(text)


def summarise_topology(text: str) -> str | None:
    """The GPU-to-GPU links of the topology matrix (its header names the columns; CPU/NUMA affinity,
    NICs and the legend are left out)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    gpus = [name for name in lines[0].split() if re.fullmatch(r"GPU\d+", name)]
    links = []
    for line in lines[1:]:
        cells = line.split()
        if cells and cells[0] in gpus:
            row = gpus.index(cells[0])
            links += [f"{cells[0]}-{other} {cells[1 + col]}" for col, other in enumerate(gpus)
                      if col > row and len(cells) > 1 + col]
    return ", ".join(links) or None


def collect(device: torch.device, engine_version: str, tensor_parallel: int = 1, replicas: int = 1) -> dict[str, Any]:
    env: dict[str, Any] = {
        "device": str(device), "host": socket.gethostname(), "python": sys.version.split()[0],
        "torch": torch.__version__, "transformers": transformers.__version__,
        "cuda": torch.version.cuda, "platform": platform.platform(), "cpu": device_name(torch.device("cpu")),
        "cpu_count": torch.get_num_threads(), "ram_bytes": total_ram(), "engine": engine_version,
        "gpu": None, "gpu_memory_bytes": None, "driver": None, "gpu_count": torch.cuda.device_count(),
        "compute_capability": None, "nvml": pynvml is not None, "tensor_parallel": tensor_parallel,
        "replicas": replicas, "topology": topology(), "throughput_basis": loaded.BASIS,
        "latency_basis": loaded.LATENCY_BASIS, "step_basis": loaded.STEP_BASIS,
        "util_basis": loaded.UTIL_BASIS,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, gpu_memory_bytes=props.total_memory,
                   compute_capability=f"{props.major}.{props.minor}")
        env["driver"] = driver_version()
    return env

