"""A server the endpoint sweep restarts for a point: the user's command run as an argv list (never through
a shell), its output appended to the run folder's server.log, ready once its API answers, and stopped
with its whole process group (a server's workers die with it)."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from runners import cancel

POLL_S = 0.5
STOP_WAIT_S = 30.0


class ServerProcess:
    def __init__(self, argv: list[str], log: Path) -> None:
        self.argv, self.log = argv, log
        self.proc: subprocess.Popen | None = None

    def start(self, ready: Callable[[], bool], timeout_s: float) -> None:
        """Start the command and wait until `ready()`; RuntimeError when it exits first or takes too long."""
        with open(self.log, "ab") as out:
            out.write(f"--- {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not ready():
            cancel.check()
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server command exited with code {self.proc.returncode} before answering "
                                   f"(its output is in {self.log.name})")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not answer within {timeout_s:g} s (its output is in {self.log.name})")
            time.sleep(POLL_S)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL if it is still there after STOP_WAIT_S."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, STOP_WAIT_S), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)  # its own group (start_new_session): only what this command started
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            try:  # workers the server left behind in its group
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
