"""Following a launched run: poll its runner, bring its files over, ingest finished points into the store,
and give it its final state. The store is passed in; nothing here decides what runs next."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runners.results.contract import TERMINAL_STATES, timestamp

from batchscope.backends.base import Sweep
from batchscope.ingest import ingest_run
from batchscope.runfolder import RunFolder
from batchscope.store import Store

log = logging.getLogger("batchscope.jobs")

SETTLE_INGEST_ATTEMPTS = 5


@dataclass
class Active:
    """A launched run being followed, and whether (and when) it was asked to stop."""

    run_id: str
    folder: Path
    sweep: Sweep
    cancel_requested_at: float | None = None
    killed: bool = False


class Follower:
    """Watches runs and keeps `store` up to their folders; one per job manager (it remembers the ingest
    warnings already logged)."""

    def __init__(self, store: Store, grace_s: float, poll_s: float, ingest_every_s: float) -> None:
        self.store = store
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.ingest_every_s = ingest_every_s
        self._warned: set[str] = set()

    def watch(self, active: Active, abandon: Callable[[], bool]) -> bool:
        """Poll the runner until it exits, bringing its files over and ingesting finished points; False if
        abandoned (`abandon()` turned true: an app shutting down that leaves runners to finish)."""
        next_ingest = 0.0
        while not active.sweep.exited():
            if abandon():
                return False
            now = time.monotonic()
            if (active.cancel_requested_at is not None and not active.killed
                    and now - active.cancel_requested_at > self.grace_s):
                active.sweep.stop(force=True)
                active.killed = True
            if now >= next_ingest:
                self.sync(active)
                self.ingest(active.folder)
                next_ingest = now + self.ingest_every_s
            time.sleep(self.poll_s)
        return True

    def sync(self, active: Active) -> None:
        """Bring the run folder up to the runner's; a failure (e.g. a full disk) is logged and retried at
        the next poll, as an ingest's is."""
        try:
            active.sweep.sync()
        except Exception:
            log.exception("bringing run %s's files over failed", active.run_id)

    def settle(self, active: Active) -> None:
        """Give the run its final state: the runner's own, else one that says how it ended."""
        run = RunFolder(active.folder)
        status = run.status() or {"run_id": active.run_id}
        if status.get("state") not in TERMINAL_STATES:
            if active.cancel_requested_at is not None:
                state, error = "cancelled", None
            else:
                state, error = active.sweep.ending()
            status.update(state=state, error=error, current=None, finished_at=timestamp())
            run.write_status(status)
        for _ in range(SETTLE_INGEST_ATTEMPTS):  # the last ingest carries the final state into the DB
            if self.ingest(active.folder):
                break
            time.sleep(self.poll_s)
        active.sweep.close()

    def settle_unlaunched(self, run_id: str, folder: Path, state: str, error: str | None) -> None:
        """A run that never launched (cancelled while queued, or refused by its backend) ends here."""
        run = RunFolder(folder)
        status = run.status() or {"run_id": run_id}
        status.update(state=state, error=error, finished_at=timestamp())
        run.write_status(status)
        self.ingest(folder)

    def ingest(self, folder: Path) -> bool:
        """Bring the DB up to the folder; False when that failed. A failure is logged, never raised: it
        would end the lane thread and leave the run looking busy forever. Callers retry; an app start
        catches up on whatever is left."""
        try:
            report = ingest_run(self.store, folder)
        except Exception:
            log.exception("ingesting %s failed", folder)
            return False
        for warning in report.warnings:
            if warning not in self._warned:
                self._warned.add(warning)
                log.warning(warning)
        return True
