"""Starting the runner as a child process, for the app's job manager: torch-free, so the app can import it
(the runner loads torch in its own process)."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import IO, Any

from runners import contract

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
