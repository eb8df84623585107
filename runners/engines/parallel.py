"""Several processes for one sweep: rank 0 drives it and writes the run folder, ranks 1..K-1 follow.

Followers are `python -m runners.engines.follower` subprocesses in their own session (a Ctrl-C in the
terminal reaches the driver only), and each dies with the driver (PR_SET_PDEATHSIG). They meet
through torch.distributed at MASTER_ADDR=127.0.0.1 on a free port: gloo carries the control channel
(commands out, replies back); on CUDA a tensor-parallel group runs the model's all-reduces on NCCL.
NVLink multicast stays off in every rank's environment.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from runners.spec import SweepSpec
from runners.spec.parallel import world_size

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
TIMEOUT = timedelta(minutes=10)  # a collective a rank never joins fails after this instead of hanging
STOP_WAIT_S = 30.0
REPO = Path(__file__).resolve().parents[2]


def rank_device(device: torch.device, rank: int) -> torch.device:
    """Rank r runs on the r-th GPU from the sweep's device on; on CPU every rank shares the host."""
    return torch.device("cuda", (device.index or 0) + rank) if device.type == "cuda" else device


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Command:
    """`op` is setup | generate | release | stop; `args[rank]` is that rank's argument."""

    op: str
    args: list[Any]


@dataclass
class Group:
    """One rank's view: `ctrl` (gloo) carries commands and replies, `model` the tensor-parallel sums."""

    rank: int
    world: int
    device: torch.device
    ctrl: dist.ProcessGroup
    model: dist.ProcessGroup

    def broadcast(self, value: Any = None) -> Any:
        """Rank 0's value on every rank."""
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.ctrl)
        return box[0]

    def gather(self, value: Any) -> list[Any] | None:
        """Every rank's value, in rank order, on rank 0 (None elsewhere)."""
        out = [None] * self.world if self.rank == 0 else None
        dist.gather_object(value, out, dst=0, group=self.ctrl)
        return out

    def barrier(self) -> None:
        dist.barrier(group=self.ctrl)


def connect(rank: int, world: int, port: int, device: torch.device, tensor_parallel: bool) -> Group:
    """Join the process group; on CPU each rank takes its share of the cores."""
    os.environ.update(MULTICAST_OFF, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    nccl = tensor_parallel and device.type == "cuda"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("nccl" if nccl else "gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=TIMEOUT)
    ctrl = dist.new_group(backend="gloo", timeout=TIMEOUT) if nccl else dist.group.WORLD
    return Group(rank, world, device, ctrl, dist.group.WORLD)


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent exits; exit now if the parent is gone."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:
        sys.exit(1)


class Team:
    """Rank 0's handle on its followers: starts them, joins the group, and ends them on close."""

    def __init__(self, spec: SweepSpec, device: torch.device) -> None:
        self.world = world_size(spec)
        port = free_port()
        env = {**os.environ, **MULTICAST_OFF,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        spec_json = json.dumps(spec.to_dict())
        self.followers = [
            subprocess.Popen([sys.executable, "-m", "runners.engines.follower", "--rank", str(rank), "--world",
                              str(self.world), "--port", str(port), "--device", str(device), "--parent",
                              str(os.getpid()), "--spec", spec_json],
                             env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
            for rank in range(1, self.world)]
        try:
            self.group = connect(0, self.world, port, device, spec.tensor_parallel > 1)
        except BaseException:
            self._end_followers()
            raise

    def close(self, graceful: bool) -> None:
        """Graceful: tell followers to stop and let them leave the group. Otherwise (cancel, failure)
        they may be stuck inside a collective rank 0 left, so they are terminated."""
        if graceful:
            try:
                self.group.broadcast(Command("stop", []))
                for proc in self.followers:
                    proc.wait(timeout=STOP_WAIT_S)
                dist.destroy_process_group()
            except (RuntimeError, subprocess.TimeoutExpired):
                pass  # the followers are ended below either way
        self._end_followers()

    def _end_followers(self) -> None:
        for proc in self.followers:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.followers:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
