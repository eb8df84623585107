"""Starting the runner as a child process, for the app's job manager on this machine and for a sweep the
job manager sent to a Ray cluster (`SweepHost`, which the app makes a Ray actor on a GPU node).

Neither ray nor torch is imported here: the runner loads torch in its own process, and the app wraps
`SweepHost` with `ray.remote`, so Ray ships it to a node inside the `runners` package.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from runners.results import contract

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the folder holding this runners package
NODE_RUNS = Path(tempfile.gettempdir()) / "batchscope-runs"  # a node's run folders, until the app has them
PR_SET_PDEATHSIG = 1


def start_runner(folder: Path, status: dict[str, Any], python: str, cwd: Path,
                 die_with_parent: bool = False) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """`python -m runners sweep` into a queued run folder, in its own session (so a SIGKILL of its group
    reaches every process it starts), with its stderr kept for the reason it gives when it fails.

    The pid goes into status.json at once: until the runner writes its own status (after importing
    torch), an app restart must see a live runner there, not a queued run to launch a second time.
    `die_with_parent`: Linux kills the runner when the process that started it dies (a Ray worker), so
    no sweep goes on where nobody collects its files. Raises OSError when it cannot start.
    """
    stderr = tempfile.TemporaryFile()
    prctl = ctypes.CDLL(None, use_errno=True).prctl if die_with_parent else None
    try:
        popen = subprocess.Popen(
            [python, "-m", "runners", "sweep", "--spec", str(folder / contract.SPEC), "--out", str(folder)],
            cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
            preexec_fn=(lambda: prctl(PR_SET_PDEATHSIG, signal.SIGKILL)) if prctl else None)
    except OSError:
        stderr.close()
        raise
    contract.write_json(folder / contract.STATUS, {**status, "state": "running", "pid": popen.pid,
                                                   "heartbeat_at": contract.timestamp()})
    return popen, stderr


def exit_reason(stderr: IO[bytes]) -> str | None:
    """The last non-empty line the runner printed to stderr: its reason for failing (exit code 1 or 2)."""
    stderr.seek(0, os.SEEK_END)
    stderr.seek(max(0, stderr.tell() - 65536))
    lines = [line.strip() for line in stderr.read().decode(errors="replace").splitlines()]
    last = next((line for line in reversed(lines) if line), None)
    return last.removeprefix("error: ") if last else None


@dataclass(frozen=True)
class HostReport:
    """One poll of a SweepHost: every file that differs from the app's copy, and how the runner ended."""

    files: dict[str, tuple[list[int], bytes]]  # path in the run folder → (signature, content), in writing order
    exit_code: int | None  # None while the runner goes
    exit_reason: str | None
    node: str  # the node's host name
    pid: int  # the runner's


class SweepHost:
    """One sweep's runner on this node, started as soon as Ray places the actor: the app's queued folder
    is recreated here and the runner writes it, and `poll` hands each file it writes to the app, so the
    app needs no shared file system (and stays the only DuckDB writer)."""

    def __init__(self, run_id: str, spec: dict[str, Any], status: dict[str, Any]) -> None:
        self.folder = NODE_RUNS / run_id
        shutil.rmtree(self.folder, ignore_errors=True)  # one left by an earlier actor of this run is stale
        self.folder.mkdir(parents=True)
        contract.write_json(self.folder / contract.SPEC, spec)
        self.node = socket.gethostname()
        self._runner, self._stderr = start_runner(self.folder, status, sys.executable, PACKAGE_ROOT,
                                                  die_with_parent=True)

    def poll(self, received: dict[str, list[int]]) -> HostReport:
        """The files whose (size, mtime) signature differs from `received` (what the app holds), point
        files before summaries and status.json last, so the app never reads a point or a count ahead of
        its files."""
        code = self._runner.poll()  # first: a runner seen gone has written every file it ever will
        files: dict[str, tuple[list[int], bytes]] = {}
        for path in self._files():
            name = path.relative_to(self.folder).as_posix()
            stat = path.stat()  # before reading: a file replaced in between is sent again next time
            signature = [stat.st_size, stat.st_mtime_ns]
            if received.get(name) != signature:
                files[name] = (signature, path.read_bytes())
        reason = exit_reason(self._stderr) if code is not None else None
        return HostReport(files, code, reason, self.node, self._runner.pid)

    def stop(self, force: bool) -> None:
        """SIGTERM (the runner stops at its next step boundary, keeping finished points) or SIGKILL to
        the runner's process group."""
        if self._runner.poll() is None:
            if force:
                os.killpg(self._runner.pid, signal.SIGKILL)
            else:
                self._runner.send_signal(signal.SIGTERM)

    def discard(self) -> None:
        """Remove this node's copy once the app holds every file of it."""
        self._stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _files(self) -> list[Path]:
        """The run's files (not the app's own spec.json, not dot-named temp files), in writing order."""
        found = [p for p in self.folder.iterdir() if p.is_file() and p.name != contract.SPEC]
        points = self.folder / contract.POINTS
        if points.is_dir():
            found += [p for p in points.iterdir() if p.is_file()]
        found = [p for p in found if not p.name.startswith(".")]
        return sorted(found, key=lambda p: (p.name == contract.STATUS, contract.summary_index(p.name) is not None,
                                            p.name))
