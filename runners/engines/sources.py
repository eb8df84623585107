"""Where the continuous engine's requests come from: the `Source` seam, and a seeded workload behind it (a
live server's clients are the other source, runners.engines.live)."""
from __future__ import annotations

import time
from typing import Protocol

from runners import cancel
from runners.engines.scheduler import Arrivals, Request


class Source(Protocol):
    """Where served requests come from: a seeded workload (Scheduled) or a live server's clients."""

    def arrived(self, now: float) -> list[Request]:
        """Requests arrived by `now` (seconds from the loop's start), stamped with their arrival."""
        ...

    def finished(self, r: Request, now: float) -> None: ...

    def wait(self, t0: float) -> bool:
        """Idle (nothing to run) until a request may have arrived; False when none ever will."""
        ...


class Scheduled:
    """A workload's Arrivals as a source: the loop sleeps until the next one is due."""

    def __init__(self, arrivals: Arrivals) -> None:
        self.arrivals = arrivals
        self.arrived, self.finished = arrivals.arrived, arrivals.finished

    def wait(self, t0: float) -> bool:
        wake = self.arrivals.next_time()
        if wake is None:
            return False
        _sleep_until(t0 + wake)
        return True



def _sleep_until(deadline: float) -> None:
    """Idle until the next arrival, in short naps so a cancel is seen within a tenth of a second."""
    while (left := deadline - time.perf_counter()) > 0:
        cancel.check()
        time.sleep(min(left, 0.1))
