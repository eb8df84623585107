"""An endpoint sweep of `runners serve` on this machine's GPU (GPU only; the runner's packages alone, so it runs
on the bare GPU host): the model runs in the server, so a point has no memory split, and what it keeps instead
is NVML's count of that GPU, inside the measured repeats, with the GPU's capacity."""
from __future__ import annotations

import socket
import sys

import pyarrow.parquet as pq
import pynvml
import pytest
import torch

from runners.telemetry.telemetry import nvml_handle
from tests.runner_helpers import run_runner

pytestmark = pytest.mark.gpu
MODEL = ["--model", "llama-3.2-1b", "--dtype", "bfloat16"]
WEIGHT_BYTES_AT_LEAST = 2.4e9  # Llama-3.2-1B in bfloat16: 1.24 B parameters, the head tied to the embedding


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_served_points_memory_is_its_gpus_count_in_use_under_its_capacity(tmp_path) -> None:
    port = free_port()
    command = " ".join([sys.executable, "-m", "runners", "serve", *MODEL, "--device", "cuda:0", "--port", str(port),
                        "--max-num-seqs", "8"])
    out = tmp_path / "served"
    done = run_runner(out, *MODEL, "--engine", "endpoint", "--url", f"http://127.0.0.1:{port}/v1",
                      "--server-command", command, "--concurrency", "1,4", "--num-requests", "8",
                      "--prompt-len", "fixed:64", "--output-len", "fixed:16", "--repeats", "1", "--warmup", "0",
                      timeout=600)
    server_log = out / "server.log"
    assert done.returncode == 0, done.stderr + (server_log.read_text()[-3000:] if server_log.exists() else "")
    rows = [pq.read_table(f).to_pylist()[0] for f in sorted((out / "points").glob("*.summary.parquet"))]
    capacity = int(pynvml.nvmlDeviceGetMemoryInfo(nvml_handle(torch.device("cuda", 0))).total)
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "ok" and row["mem_weights"] is None and row["mem_kv_allocated"] is None
        assert row["mem_capacity"] == capacity
        assert WEIGHT_BYTES_AT_LEAST < row["mem_nvml_used"] <= capacity
