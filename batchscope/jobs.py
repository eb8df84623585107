"""Background sweeps: queued per lane, launched through a backend, watched, ingested and settled.

The manager is a per-process singleton so every Streamlit session shares one view of what runs where.
A lane thread launches its queue's runs one at a time, ingests finished points while a run goes, and
settles the final state. Where a runner runs is its backend's business (batchscope.backends): a
subprocess of this machine, one lane per device; or, for a run sent to a Ray cluster's GPU type, an actor
on a cluster node, each run in a lane of its own while Ray's scheduler queues it. Runners outlive an
app restart; `recover()` then reattaches to them, or marks a run `interrupted` if its runner is gone.
"""
from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from runners import spec as runner_spec
from runners.spec import point_count
from runners.contract import SPEC, STATUS, TERMINAL_STATES, new_status, parse_utc, timestamp, utc_now, write_json

from batchscope import config
from batchscope.backends.base import Backend, LaunchError, Sweep
from batchscope.backends.local import LocalBackend, runner_alive, runner_gone
from batchscope.backends.ray_cluster import ClusterError, RayBackend
from batchscope.ingest import ingest_run
from batchscope.runfolder import RunFolder
from batchscope.store import Store
from batchscope.store_file import StoreUnavailableError

log = logging.getLogger(__name__)

SETTLE_INGEST_ATTEMPTS = 5


def make_run_id(label: str, moment: datetime) -> str:
    """`20261129-071500-tiny-3fa2c1`: sortable by time, readable, unique by its random suffix."""
    slug = re.sub(r"[^a-z0-9]+", "-", Path(label.rstrip("/")).name.lower()).strip("-")[:24].strip("-")
    return f"{moment:%Y%m%d-%H%M%S}-{slug or 'run'}-{secrets.token_hex(3)}"


def interrupted(status: dict[str, Any], error: str) -> dict[str, Any]:
    """A `running` status whose runner is gone, as the `interrupted` one the app and an import store."""
    return {**status, "state": "interrupted", "current": None, "finished_at": timestamp(), "error": error}


def settle_if_runner_gone(store: Store, run_id: str) -> None:
    """An imported run stored `running` whose runner is gone (kill -9, a crash, a reboot) is `interrupted`,
    as recover() makes it, never `running` forever; its folder, made elsewhere, is not written."""
    run = store.run(run_id)
    if run and run["state"] == "running" and not runner_alive(run["pid"], run_id):
        store.set_state(run_id, "interrupted", runner_gone(run["status"] or {}))


@dataclass
class _Active:
    """A launched run the manager watches, and whether (and when) it was asked to stop."""

    run_id: str
    folder: Path
    sweep: Sweep
    cancel_requested_at: float | None = None
    killed: bool = False


@dataclass
class _Lane:
    """One queue (a device's, or one cluster run's): runs waiting in submission order and the one going now.
    A transient lane ends once its runs are settled."""

    key: str
    transient: bool = False
    waiting: deque[str] = field(default_factory=deque)
    current: _Active | None = None
    thread: threading.Thread | None = None


class JobManager:
    """Queue, launch, watch, cancel and recover sweeps; use `JobManager.instance()` in the app."""

    _instances: ClassVar[dict[tuple[Path, Path], JobManager]] = {}
    _instances_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, store: Store, runs_dir: Path, python: str | None = None,
                 grace_s: float = 10.0, poll_s: float = 0.25, ingest_every_s: float = 1.0,
                 cluster: RayBackend | None = None) -> None:
        self.store = store
        self.runs_dir = Path(runs_dir).resolve()
        self.local = LocalBackend(python or config.runner_python())
        self.cluster = cluster  # the Ray cluster runs with a `cluster_gpu` go to; None: this machine only
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.ingest_every_s = ingest_every_s
        self._lanes: dict[str, _Lane] = {}
        self._folders: dict[str, Path] = {}
        self._order: dict[str, int] = {}
        self._warned: set[str] = set()
        self._changed = threading.Condition(threading.RLock())
        self._stopping = False
        self._cancel_on_stop = True

    @classmethod
    def instance(cls, store_path: str | Path | None = None, runs_dir: str | Path | None = None) -> JobManager:
        """The process-wide manager for this DB and runs folder; created (and recovered) on first use. Over a
        read-only DB it only reads: nothing is recovered, and submit refuses."""
        db = Path(store_path) if store_path is not None else config.db_path()
        runs = Path(runs_dir) if runs_dir is not None else config.runs_dir()
        key = (db.resolve(), runs.resolve())
        with cls._instances_lock:
            manager = cls._instances.get(key)
            if manager is None:
                address = config.ray_address()
                manager = cls(Store(db), runs, cluster=RayBackend(address) if address else None)
                if not manager.store.read_only:
                    manager.recover()
                cls._instances[key] = manager
            return manager

    # ---- public API ----------------------------------------------------------------------------

    def submit(self, spec: dict[str, Any], owner: str = "local") -> str:
        """Validate, create the run folder (spec.json + queued status.json) and queue it; returns run id.

        `cluster_gpu` (a GPU type of the Ray cluster, e.g. "H200") sends the run to the cluster, asking
        for one GPU of that type per rank on one node, instead of running it on this machine.
        Raises runners.spec.SpecError for bad input, and StoreUnavailableError for a read-only history,
        before anything is written. `owner` is who launched it (batchscope.team.actions checks they may,
        and their queue limit).
        """
        if self.store.read_only:
            raise StoreUnavailableError(self.store.read_only)
        options = {key: value for key, value in spec.items() if key != "cluster_gpu"}
        validated = runner_spec.validate(options, model_roots=config.model_roots()).to_dict()
        placement = self._placement(spec.get("cluster_gpu"), validated)
        created = utc_now()
        run_id = make_run_id(validated.get("name") or validated["model"], created)
        folder = self.runs_dir / run_id
        folder.mkdir(parents=True)
        spec_out = {**validated, **placement, "run_id": run_id, "created_at": timestamp(created)}
        status = new_status(run_id, "queued", point_count(runner_spec.SweepSpec(**validated)))
        write_json(folder / SPEC, spec_out)
        write_json(folder / STATUS, status)
        self.store.upsert_run(run_id, folder, spec_out, status, None, None, None, owner=owner)
        self._enqueue(run_id, folder, spec_out)
        return run_id

    def cancel(self, run_id: str) -> None:
        """Queued: dropped and marked cancelled. Running: SIGTERM (the runner stops at the next step
        and keeps finished points), SIGKILL after `grace_s`. Finished: nothing to do."""
        with self._changed:
            for lane in self._lanes.values():
                if run_id in lane.waiting:
                    lane.waiting.remove(run_id)
                    self._settle_unlaunched(run_id, "cancelled", None)
                    self._changed.notify_all()
                    return
                active = lane.current
                if active is not None and active.run_id == run_id:
                    if active.cancel_requested_at is None:
                        active.cancel_requested_at = time.monotonic()
                        active.sweep.stop(force=False)
                    return
        if self.store.run(run_id) is None:
            raise KeyError(run_id)

    def progress(self, run_id: str) -> dict[str, Any]:
        """status.json's fields plus elapsed_s, eta_s, queue_position (1 = launches next; None when not
        waiting) and settled. Raises KeyError for an unknown run.

        `settled` is False until the manager has ingested the run's final state: the runner writes
        `done` before it exits, and the DB catches up only after that, so a page that stopped
        refreshing at `done` could be left showing no points."""
        folder = self._folder(run_id)
        status = RunFolder(folder).status() if folder is not None else None
        if status is None:
            stored = self.store.run(run_id)
            if stored is None:
                raise KeyError(run_id)
            status = stored["status"] or {}
        progress = dict(status)
        started, finished = parse_utc(status.get("started_at")), parse_utc(status.get("finished_at"))
        elapsed = ((finished or utc_now()) - started).total_seconds() if started else None
        done, total = status.get("points_done") or 0, status.get("points_total") or 0
        eta = None
        if status.get("state") == "running" and elapsed is not None and done and total >= done:
            eta = elapsed / done * (total - done)
        progress.update(elapsed_s=elapsed, eta_s=eta, queue_position=self._queue_position(run_id),
                        settled=not self._in_hand(run_id))
        return progress

    def queue(self) -> list[str]:
        """Runs waiting to launch, on every device, in submission order."""
        with self._changed:
            waiting = [run_id for lane in self._lanes.values() for run_id in lane.waiting]
            return sorted(waiting, key=self._order.__getitem__)

    def active(self) -> list[str]:
        """Runs launched and not yet settled: one per device at most, and every run sent to the Ray
        cluster, going or waiting there for its GPUs."""
        with self._changed:
            return [lane.current.run_id for lane in self._lanes.values() if lane.current is not None]

    def wait(self, run_id: str, timeout: float) -> str:
        """Block until the run has finished and been fully ingested; its final state. TimeoutError if not."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                state = self._settled_state(run_id)
                if state is not None:
                    return state
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"run {run_id} still {self._stored_state(run_id)} after {timeout} s")
                self._changed.wait(min(remaining, self.poll_s))

    def recover(self) -> list[str]:
        """Settle runs left behind by an earlier app process; returns the ids marked `interrupted`.

        Running with a live runner (or, on the Ray cluster, its actor still there): reattached, watched
        and ingested. Running with its runner gone: `interrupted`, finished points ingested. Queued:
        queued again, oldest first. Already finished in its folder: ingested so the DB catches up. A
        cluster run this app cannot reach (no BATCHSCOPE_RAY_ADDRESS, or the cluster is down) is left
        as it is, with a warning, for an app that can.
        """
        interrupted_ids = []
        for run_id, folder in self._leftover_runs():
            run = RunFolder(folder)
            status, spec = run.status() or {}, run.spec() or {}
            state = status.get("state")
            if state not in ("running", "queued"):
                self._ingest(folder)
                continue
            try:
                backend = self._backend(spec)
                sweep = backend.reattach(run_id, folder, status)
            except (LaunchError, ClusterError) as error:
                log.warning("run %s is left %s: %s", run_id, state, error)
                continue
            if sweep is not None:
                self._adopt(run_id, folder, backend.lane(run_id, spec), backend.queues_itself, sweep)
            elif state == "running":
                status = interrupted(status, backend.gone(status))
                if folder.is_relative_to(self.runs_dir):
                    run.write_status(status)
                    self._ingest(folder)
                else:
                    self._ingest(folder)
                    self.store.set_state(run_id, "interrupted", status["error"])
                interrupted_ids.append(run_id)
            elif folder.is_relative_to(self.runs_dir):
                self._enqueue(run_id, folder, spec)
            else:
                self._ingest(folder)
        return interrupted_ids

    def shutdown(self, cancel_running: bool = True) -> None:
        """Stop the lanes. Running sweeps are cancelled, or with cancel_running=False left to finish
        on their own (a later recover() adopts them). Waiting runs stay queued in their folders."""
        with self._changed:
            if self._stopping:
                return
            self._stopping = True
            self._cancel_on_stop = cancel_running
            lanes = list(self._lanes.values())
            running = [lane.current.run_id for lane in lanes if lane.current is not None]
            self._changed.notify_all()
        if cancel_running:
            for run_id in running:
                self.cancel(run_id)
        for lane in lanes:
            if lane.thread is not None:
                lane.thread.join()
        with self._instances_lock:
            for key, manager in list(self._instances.items()):
                if manager is self:
                    del self._instances[key]
        self.store.close()

    # ---- queueing and lanes --------------------------------------------------------------------

    def _placement(self, cluster_gpu: Any, spec: dict[str, Any]) -> dict[str, Any]:
        """The spec.json keys that send a run to the Ray cluster's `cluster_gpu` type; none for this machine."""
        if cluster_gpu is None:
            return {}
        if self.cluster is None:
            raise runner_spec.SpecError("device", "no Ray cluster is set up for this app: set BATCHSCOPE_RAY_ADDRESS "
                                                  "to send sweeps to one")
        self.cluster.check_placement(str(cluster_gpu), spec)
        return {"cluster_gpu": str(cluster_gpu)}

    def _backend(self, spec: dict[str, Any]) -> Backend:
        """Where a run's runner goes: the Ray cluster for a run sent to its GPUs, else this machine."""
        if spec.get("cluster_gpu") is None:
            return self.local
        if self.cluster is None:
            raise LaunchError(f"it was sent to the Ray cluster's {spec['cluster_gpu']} GPUs, and "
                              f"BATCHSCOPE_RAY_ADDRESS is not set")
        return self.cluster

    def _enqueue(self, run_id: str, folder: Path, spec: dict[str, Any]) -> None:
        backend = self._backend(spec)
        with self._changed:
            self._folders[run_id] = folder
            self._order.setdefault(run_id, len(self._order))
            self._lane(backend.lane(run_id, spec), backend.queues_itself).waiting.append(run_id)
            self._changed.notify_all()

    def _lane(self, key: str, transient: bool) -> _Lane:
        lane = self._lanes.get(key)
        if lane is None:
            lane = _Lane(key, transient)
            lane.thread = threading.Thread(target=self._lane_loop, args=(lane,),
                                           name=f"batchscope-lane-{key}", daemon=True)
            self._lanes[key] = lane
            lane.thread.start()
        return lane

    def _lane_loop(self, lane: _Lane) -> None:
        while True:
            with self._changed:
                while lane.current is None and not lane.waiting and not self._stopping and not lane.transient:
                    self._changed.wait()
                if lane.current is None and (self._stopping or not lane.waiting):
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
                        self._changed.notify_all()
                        continue
                active = lane.current
            finished = self._watch(active)
            if finished:
                try:
                    self._settle(active)
                except Exception:  # e.g. a full disk: the next runs must still launch; recover() settles it
                    log.exception("settling run %s failed", active.run_id)
            with self._changed:
                lane.current = None
                self._changed.notify_all()
                if not finished:
                    return

    def _launch(self, run_id: str) -> _Active | None:
        folder = self._folders[run_id]
        spec = RunFolder(folder).spec() or {}
        try:
            sweep = self._backend(spec).launch(run_id, folder, spec)
        except LaunchError as error:
            self._settle_unlaunched(run_id, "failed", str(error))
            return None
        return _Active(run_id, folder, sweep)

    def _adopt(self, run_id: str, folder: Path, key: str, transient: bool, sweep: Sweep) -> None:
        """Watch a runner left by an earlier app process, if its lane is free (a device's lane may already
        watch another one; that run is left to a later recover)."""
        with self._changed:
            lane = self._lane(key, transient)
            if lane.current is not None:
                return
            self._folders[run_id] = folder
            self._order.setdefault(run_id, len(self._order))
            lane.current = _Active(run_id, folder, sweep)
            self._changed.notify_all()

    def _watch(self, active: _Active) -> bool:
        """Poll the runner until it exits, bringing its files over and ingesting finished points; False if
        abandoned at shutdown."""
        next_ingest = 0.0
        while not active.sweep.exited():
            if self._stopping and not self._cancel_on_stop:
                return False
            now = time.monotonic()
            if (active.cancel_requested_at is not None and not active.killed
                    and now - active.cancel_requested_at > self.grace_s):
                active.sweep.stop(force=True)
                active.killed = True
            if now >= next_ingest:
                self._sync(active)
                self._ingest(active.folder)
                next_ingest = now + self.ingest_every_s
            time.sleep(self.poll_s)
        return True

    def _sync(self, active: _Active) -> None:
        """Bring the run folder up to the runner's; a failure (e.g. a full disk) is logged and retried at
        the next poll, as an ingest's is."""
        try:
            active.sweep.sync()
        except Exception:
            log.exception("bringing run %s's files over failed", active.run_id)

    def _settle(self, active: _Active) -> None:
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
            if self._ingest(active.folder):
                break
            time.sleep(self.poll_s)
        active.sweep.close()

    def _settle_unlaunched(self, run_id: str, state: str, error: str | None) -> None:
        folder = self._folders[run_id]
        run = RunFolder(folder)
        status = run.status() or {"run_id": run_id}
        status.update(state=state, error=error, finished_at=timestamp())
        run.write_status(status)
        self._ingest(folder)

    def _ingest(self, folder: Path) -> bool:
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

    # ---- lookups -------------------------------------------------------------------------------

    def _leftover_runs(self) -> list[tuple[str, Path]]:
        """Runs the DB or the runs folder still call queued or running, oldest first, not managed now."""
        found: dict[str, Path] = {}
        stored = self.store.runs(state=["queued", "running"])
        for run_id, folder in zip(stored["run_id"], stored["folder"]):
            if folder:
                found[run_id] = Path(folder)
        if self.runs_dir.is_dir():
            for folder in sorted(self.runs_dir.iterdir()):
                status = RunFolder(folder).status() if folder.is_dir() else None
                if status and status.get("state") in ("queued", "running"):
                    found.setdefault(folder.name, folder)
        with self._changed:
            managed = set(self._folders)
        return sorted((item for item in found.items() if item[0] not in managed), key=lambda item: item[0])

    def _folder(self, run_id: str) -> Path | None:
        with self._changed:
            folder = self._folders.get(run_id)
        if folder is None:
            stored = self.store.run(run_id)
            folder = Path(stored["folder"]) if stored and stored.get("folder") else None
        return folder

    def _queue_position(self, run_id: str) -> int | None:
        with self._changed:
            for lane in self._lanes.values():
                if run_id in lane.waiting:
                    return list(lane.waiting).index(run_id) + 1
        return None

    def _stored_state(self, run_id: str) -> str | None:
        stored = self.store.run(run_id)
        return stored["state"] if stored else None

    def _in_hand(self, run_id: str) -> bool:
        """True while this manager has the run queued, running, or not yet settled and ingested."""
        with self._changed:
            return any(run_id in lane.waiting or (lane.current is not None and lane.current.run_id == run_id)
                       for lane in self._lanes.values())

    def _settled_state(self, run_id: str) -> str | None:
        """The final state once the manager is done with the run; None while it is queued or going."""
        if self._in_hand(run_id):
            return None
        state = self._stored_state(run_id)
        return state if state in TERMINAL_STATES else None
