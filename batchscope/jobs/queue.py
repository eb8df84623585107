"""The queues: one lane per device (or per cluster run), each launching its runs one at a time in
submission order and following the one going now until it is settled."""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchscope.backends.base import LaunchError, Sweep
from batchscope.jobs.follower import Active, Follower
from batchscope.jobs.launcher import Launcher

log = logging.getLogger("batchscope.jobs")


@dataclass
class Lane:
    """One queue (a device's, or one cluster run's): runs waiting in submission order and the one going now.
    A transient lane ends once its runs are settled."""

    key: str
    transient: bool = False
    waiting: deque[str] = field(default_factory=deque)
    current: Active | None = None
    thread: threading.Thread | None = None


class Queue:
    """Every lane, and where each run it knows lives; `changed` is notified on every change of a lane."""

    def __init__(self, launcher: Launcher, follower: Follower) -> None:
        self.launcher = launcher
        self.follower = follower
        self.changed = threading.Condition(threading.RLock())
        self.stopping = False
        self.cancel_on_stop = True
        self._lanes: dict[str, Lane] = {}
        self._folders: dict[str, Path] = {}
        self._order: dict[str, int] = {}

    def enqueue(self, run_id: str, folder: Path, spec: dict[str, Any]) -> None:
        """Queue a run on its backend's lane (LaunchError when it has none)."""
        backend = self.launcher.backend(spec)
        with self.changed:
            self._folders[run_id] = folder
            self._order.setdefault(run_id, len(self._order))
            self._lane(backend.lane(run_id, spec), backend.queues_itself).waiting.append(run_id)
            self.changed.notify_all()

    def adopt(self, run_id: str, folder: Path, key: str, transient: bool, sweep: Sweep) -> None:
        """Follow a runner left by an earlier app process, if its lane is free (a device's lane may already
        follow another one; that run is left to a later recover)."""
        with self.changed:
            lane = self._lane(key, transient)
            if lane.current is not None:
                return
            self._folders[run_id] = folder
            self._order.setdefault(run_id, len(self._order))
            lane.current = Active(run_id, folder, sweep)
            self.changed.notify_all()

    def cancel(self, run_id: str) -> bool:
        """Queued: dropped and settled cancelled. Going: asked to stop (SIGTERM; the follower kills it after
        its grace). False when no lane has it."""
        with self.changed:
            for lane in self._lanes.values():
                if run_id in lane.waiting:
                    lane.waiting.remove(run_id)
                    self.follower.settle_unlaunched(run_id, self._folders[run_id], "cancelled", None)
                    self.changed.notify_all()
                    return True
                active = lane.current
                if active is not None and active.run_id == run_id:
                    if active.cancel_requested_at is None:
                        active.cancel_requested_at = time.monotonic()
                        active.sweep.stop(force=False)
                    return True
        return False

    def waiting(self) -> list[str]:
        """Runs waiting to launch, on every lane, in submission order."""
        with self.changed:
            found = [run_id for lane in self._lanes.values() for run_id in lane.waiting]
            return sorted(found, key=self._order.__getitem__)

    def going(self) -> list[str]:
        """Runs launched and not yet settled: one per device at most, and every cluster run."""
        with self.changed:
            return [lane.current.run_id for lane in self._lanes.values() if lane.current is not None]

    def position(self, run_id: str) -> int | None:
        """1 when the run launches next on its lane; None when it is not waiting."""
        with self.changed:
            for lane in self._lanes.values():
                if run_id in lane.waiting:
                    return list(lane.waiting).index(run_id) + 1
        return None

    def in_hand(self, run_id: str) -> bool:
        """True while the run is queued, going, or not yet settled and ingested."""
        with self.changed:
            return any(run_id in lane.waiting or (lane.current is not None and lane.current.run_id == run_id)
                       for lane in self._lanes.values())

    def folder(self, run_id: str) -> Path | None:
        with self.changed:
            return self._folders.get(run_id)

    def managed(self) -> set[str]:
        with self.changed:
            return set(self._folders)

    def stop(self, cancel_running: bool) -> tuple[list[Lane], list[str]] | None:
        """Tell every lane to stop; the lanes and the runs going now, or None when told already."""
        with self.changed:
            if self.stopping:
                return None
            self.stopping = True
            self.cancel_on_stop = cancel_running
            lanes = list(self._lanes.values())
            self.changed.notify_all()
            return lanes, [lane.current.run_id for lane in lanes if lane.current is not None]

    def _lane(self, key: str, transient: bool) -> Lane:
        lane = self._lanes.get(key)
        if lane is None:
            lane = Lane(key, transient)
            lane.thread = threading.Thread(target=self._lane_loop, args=(lane,),
                                           name=f"batchscope-lane-{key}", daemon=True)
            self._lanes[key] = lane
            lane.thread.start()
        return lane

    def _lane_loop(self, lane: Lane) -> None:
        while True:
            with self.changed:
                while lane.current is None and not lane.waiting and not self.stopping and not lane.transient:
                    self.changed.wait()
                if lane.current is None and (self.stopping or not lane.waiting):
                    if lane.transient and self._lanes.get(lane.key) is lane:
                        del self._lanes[lane.key]
                    return
                if lane.current is None:
                    run_id = lane.waiting.popleft()
                    try:
                        lane.current = self._launch(run_id)
                    except Exception:  # e.g. its folder is unwritable: the runs behind it must still go
                        log.exception("launching run %s failed", run_id)
                    if lane.current is None:
                        self.changed.notify_all()
                        continue
                active = lane.current
            finished = self.follower.watch(active, lambda: self.stopping and not self.cancel_on_stop)
            if finished:
                try:
                    self.follower.settle(active)
                except Exception:  # e.g. a full disk: the next runs must still launch; recover() settles it
                    log.exception("settling run %s failed", active.run_id)
            with self.changed:
                lane.current = None
                self.changed.notify_all()
                if not finished:
                    return

    def _launch(self, run_id: str) -> Active | None:
        folder = self._folders[run_id]
        try:
            return self.launcher.launch(run_id, folder)
        except LaunchError as error:
            self.follower.settle_unlaunched(run_id, folder, "failed", str(error))
            return None
