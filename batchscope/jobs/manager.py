"""The job manager: the one object the app holds to submit, cancel, follow and wait on sweeps.

It is a per-process singleton so every Streamlit session shares one view of what runs where. Its parts
have one job each, with the store passed in: `lanes` (jobs.queue: one run at a time per lane),
`launcher` (which backend: a subprocess of this machine, one lane per device, or an actor on a Ray
cluster node, each run in a lane of its own while Ray's scheduler queues it), `follower` (watch, ingest,
settle) and `recovery` (runners outlive an app restart; `recover()` reattaches to them, or marks a run
`interrupted` if its runner is gone). Views read runs through the store, never through the manager.
"""
from __future__ import annotations

import re
import secrets
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from runners import spec as runner_spec
from runners.results.contract import (SPEC, STATUS, TERMINAL_STATES, new_status, parse_utc, timestamp, utc_now,
                                      write_json)
from runners.spec import point_count

from batchscope import config
from batchscope.backends.local import LocalBackend
from batchscope.backends.ray_cluster import RayBackend
from batchscope.jobs import recovery
from batchscope.jobs.follower import Follower
from batchscope.jobs.launcher import Launcher
from batchscope.jobs.queue import Queue
from batchscope.runfolder import RunFolder
from batchscope.store import Store
from batchscope.store_file import StoreUnavailableError


def make_run_id(label: str, moment: datetime) -> str:
    """`20261129-071500-tiny-3fa2c1`: sortable by time, readable, unique by its random suffix."""
    slug = re.sub(r"[^a-z0-9]+", "-", Path(label.rstrip("/")).name.lower()).strip("-")[:24].strip("-")
    return f"{moment:%Y%m%d-%H%M%S}-{slug or 'run'}-{secrets.token_hex(3)}"


class JobManager:
    """Queue, launch, follow, cancel and recover sweeps; use `JobManager.instance()` in the app."""

    _instances: ClassVar[dict[tuple[Path, Path], JobManager]] = {}
    _instances_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, store: Store, runs_dir: Path, python: str | None = None,
                 grace_s: float = 10.0, poll_s: float = 0.25, ingest_every_s: float = 1.0,
                 cluster: RayBackend | None = None) -> None:
        self.store = store
        self.runs_dir = Path(runs_dir).resolve()
        self.poll_s = poll_s
        self.launcher = Launcher(LocalBackend(python or config.runner_python()), cluster)
        self.follower = Follower(store, grace_s, poll_s, ingest_every_s)
        self.lanes = Queue(self.launcher, self.follower)

    @property
    def cluster(self) -> RayBackend | None:
        """The Ray cluster runs with a `cluster_gpu` go to; None: this machine only."""
        return self.launcher.cluster

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
        placement = self.launcher.placement(spec.get("cluster_gpu"), validated)
        created = utc_now()
        run_id = make_run_id(validated.get("name") or validated["model"], created)
        folder = self.runs_dir / run_id
        folder.mkdir(parents=True)
        spec_out = {**validated, **placement, "run_id": run_id, "created_at": timestamp(created)}
        status = new_status(run_id, "queued", point_count(runner_spec.SweepSpec(**validated)))
        write_json(folder / SPEC, spec_out)
        write_json(folder / STATUS, status)
        self.store.upsert_run(run_id, folder, spec_out, status, None, None, None, owner=owner)
        self.lanes.enqueue(run_id, folder, spec_out)
        return run_id

    def cancel(self, run_id: str) -> None:
        """Queued: dropped and marked cancelled. Running: SIGTERM (the runner stops at the next step
        and keeps finished points), SIGKILL after `grace_s`. Finished: nothing to do."""
        if not self.lanes.cancel(run_id) and self.store.run(run_id) is None:
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
        progress.update(elapsed_s=elapsed, eta_s=eta, queue_position=self.lanes.position(run_id),
                        settled=not self.lanes.in_hand(run_id))
        return progress

    def queue(self) -> list[str]:
        """Runs waiting to launch, on every device, in submission order."""
        return self.lanes.waiting()

    def active(self) -> list[str]:
        """Runs launched and not yet settled: one per device at most, and every run sent to the Ray
        cluster, going or waiting there for its GPUs."""
        return self.lanes.going()

    def wait(self, run_id: str, timeout: float) -> str:
        """Block until the run has finished and been fully ingested; its final state. TimeoutError if not."""
        deadline = time.monotonic() + timeout
        with self.lanes.changed:
            while True:
                state = self._settled_state(run_id)
                if state is not None:
                    return state
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"run {run_id} still {self._stored_state(run_id)} after {timeout} s")
                self.lanes.changed.wait(min(remaining, self.poll_s))

    def recover(self) -> list[str]:
        """Settle runs left behind by an earlier app process (recovery.recover); the ids marked `interrupted`."""
        return recovery.recover(self.store, self.runs_dir, self.lanes)

    def shutdown(self, cancel_running: bool = True) -> None:
        """Stop the lanes. Running sweeps are cancelled, or with cancel_running=False left to finish
        on their own (a later recover() adopts them). Waiting runs stay queued in their folders."""
        stopped = self.lanes.stop(cancel_running)
        if stopped is None:  # stopped already
            return
        lanes, running = stopped
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

    # ---- lookups -------------------------------------------------------------------------------

    def _folder(self, run_id: str) -> Path | None:
        folder = self.lanes.folder(run_id)
        if folder is None:
            stored = self.store.run(run_id)
            folder = Path(stored["folder"]) if stored and stored.get("folder") else None
        return folder

    def _stored_state(self, run_id: str) -> str | None:
        stored = self.store.run(run_id)
        return stored["state"] if stored else None

    def _settled_state(self, run_id: str) -> str | None:
        """The final state once the manager is done with the run; None while it is queued or going."""
        if self.lanes.in_hand(run_id):
            return None
        state = self._stored_state(run_id)
        return state if state in TERMINAL_STATES else None
