"""Cancellation at step boundaries: SIGTERM (the app's cancel) or SIGINT (Ctrl-C) sets a flag that engines
check between steps, and while they idle."""
from __future__ import annotations

import signal
import threading

_requested = threading.Event()


class Cancelled(Exception):
    """Raised at a step boundary after a cancel request; the current point is dropped, earlier kept."""


def install_handlers() -> None:
    """SIGTERM and SIGINT both ask for a cancel: the sweep ends `cancelled` with its finished points."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: _requested.set())


def requested() -> bool:
    return _requested.is_set()


def check() -> None:
    if _requested.is_set():
        raise Cancelled("cancelled by SIGTERM or SIGINT")
