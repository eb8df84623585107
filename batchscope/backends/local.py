"""The local backend: each run a `python -m runners sweep` subprocess of this machine, one at a time per
device. Runners start in their own session, so a sweep outlives an app restart and is reattached by pid."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import IO, Any

from batchscope import config
from batchscope.backends.base import LaunchError, exit_outcome
from batchscope.runfolder import RunFolder
from runners.host import exit_reason, start_runner


def device_key(device: str) -> str:
    """The queue a spec's device runs in: "cpu" or "cuda:N" ("auto" means cuda:0 when a GPU exists)."""
    if device == "cpu":
        return "cpu"
    if device.startswith("cuda:"):
        return device
    if device == "cuda" or _nvidia_gpu_present():
        return "cuda:0"
    return "cpu"


def _nvidia_gpu_present() -> bool:
    """Whether the runner's "auto" will pick a GPU, decided without importing torch or NVML."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def runner_alive(pid: int | None, run_id: str | None = None) -> bool:
    """True when `pid` is a live (not zombie) BatchScope runner — of this run when `run_id` is given,
    so a pid reused by another runner after a reboot is not taken for ours."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    proc = Path(f"/proc/{pid}")
    if not proc.is_dir():
        return True
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = (proc / "cmdline").read_bytes()
    except (OSError, IndexError):
        return False
    return state != "Z" and b"runners" in cmdline and (run_id is None or run_id.encode() in cmdline)


def runner_gone(status: dict[str, Any]) -> str:
    """The error of a `running` run whose runner process is gone (kill -9, a crash, a reboot)."""
    return (f"runner process {status.get('pid')} ended without finishing "
            f"(last heartbeat {status.get('heartbeat_at')})")


class LocalSweep:
    """A runner process of this machine: the manager's own child, or (pid only) one adopted after a restart."""

    def __init__(self, run_id: str, pid: int, popen: subprocess.Popen[bytes] | None = None,
                 stderr: IO[bytes] | None = None) -> None:
        self.run_id = run_id
        self.pid = pid
        self._popen = popen
        self._stderr = stderr

    def exited(self) -> bool:
        if self._popen is not None:
            return self._popen.poll() is not None
        return not runner_alive(self.pid, self.run_id)

    def sync(self) -> None:
        """Nothing to do: the runner writes the app's run folder itself."""

    def stop(self, force: bool) -> None:
        """SIGTERM to the runner; SIGKILL to its whole process group (it runs in its own session), so
        nothing it started outlives it."""
        if self.exited():
            return
        if force:
            os.killpg(self.pid, signal.SIGKILL)
        else:
            os.kill(self.pid, signal.SIGTERM)

    def ending(self) -> tuple[str, str | None]:
        code = self._popen.returncode if self._popen is not None else None
        reason = exit_reason(self._stderr) if self._stderr is not None else None
        return exit_outcome(code, reason, f"runner process {self.pid}")

    def close(self) -> None:
        if self._stderr is not None:
            self._stderr.close()


class LocalBackend:
    """Runner subprocesses of this machine, queued one per device by the job manager."""

    queues_itself = False

    def __init__(self, python: str) -> None:
        self.python = python

    def lane(self, run_id: str, spec: dict[str, Any]) -> str:
        return device_key(spec.get("device", "auto"))

    def launch(self, run_id: str, folder: Path, spec: dict[str, Any]) -> LocalSweep:
        try:
            popen, stderr = start_runner(folder, RunFolder(folder).status() or {"run_id": run_id}, self.python,
                                         config.REPO_ROOT)
        except OSError as error:
            raise LaunchError(f"could not start the runner: {error}") from None
        return LocalSweep(run_id, popen.pid, popen, stderr)

    def reattach(self, run_id: str, folder: Path, status: dict[str, Any]) -> LocalSweep | None:
        pid = status.get("pid")
        if status.get("state") == "running" and runner_alive(pid, run_id):
            return LocalSweep(run_id, pid)
        return None

    def gone(self, status: dict[str, Any]) -> str:
        return runner_gone(status)
