"""Cancellation at step boundaries: SIGTERM sets a flag that engines check between steps."""
from __future__ import annotations

import signal
import threading

_requested = threading.Event()


class Cancelled(Exception):
    """Raised at a step boundary after a cancel request; the current point is dropped, earlier kept."""


def install_sigterm_handler() -> None:
    signal.signal(signal.SIGTERM, lambda signum, frame: _requested.set())


def requested() -> bool:
    return _requested.is_set()


def check() -> None:
    if _requested.is_set():
        raise Cancelled("cancelled by SIGTERM")
