"""After an app restart: runs an earlier process left queued or running are reattached, queued again, or
settled `interrupted` when their runner is gone. The store is passed in."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from batchscope.backends.base import LaunchError
from batchscope.backends.local import runner_alive, runner_gone
from batchscope.backends.ray_cluster import ClusterError
from batchscope.jobs.queue import Queue
from batchscope.runfolder import RunFolder
from batchscope.store import Store
from runners.results.contract import timestamp

log = logging.getLogger("batchscope.jobs")


def interrupted(status: dict[str, Any], error: str) -> dict[str, Any]:
    """A `running` status whose runner is gone, as the `interrupted` one the app and an import store."""
    return {**status, "state": "interrupted", "current": None, "finished_at": timestamp(), "error": error}


def settle_if_runner_gone(store: Store, run_id: str) -> None:
    """An imported run stored `running` whose runner is gone (kill -9, a crash, a reboot) is `interrupted`,
    as recover() makes it, never `running` forever; its folder, made elsewhere, is not written."""
    run = store.run(run_id)
    if run and run["state"] == "running" and not runner_alive(run["pid"], run_id):
        store.set_state(run_id, "interrupted", runner_gone(run["status"] or {}))


def leftover_runs(store: Store, runs_dir: Path, managed: set[str]) -> list[tuple[str, Path]]:
    """Runs the DB or the runs folder still call queued or running, oldest first, not `managed` now."""
    found: dict[str, Path] = {}
    stored = store.runs(state=["queued", "running"])
    for run_id, folder in zip(stored["run_id"], stored["folder"]):
        if folder:
            found[run_id] = Path(folder)
    if runs_dir.is_dir():
        for folder in sorted(runs_dir.iterdir()):
            status = RunFolder(folder).status() if folder.is_dir() else None
            if status and status.get("state") in ("queued", "running"):
                found.setdefault(folder.name, folder)
    return sorted((item for item in found.items() if item[0] not in managed), key=lambda item: item[0])


def recover(store: Store, runs_dir: Path, queue: Queue) -> list[str]:
    """Settle runs left behind by an earlier app process; returns the ids marked `interrupted`.

    Running with a live runner (or, on the Ray cluster, its actor still there): reattached, followed and
    ingested. Running with its runner gone: `interrupted`, finished points ingested. Queued: queued
    again, oldest first. Already finished in its folder: ingested so the DB catches up. A cluster run
    this app cannot reach (no BATCHSCOPE_RAY_ADDRESS, or the cluster is down) is left as it is, with a
    warning, for an app that can.
    """
    ingest = queue.follower.ingest
    interrupted_ids = []
    for run_id, folder in leftover_runs(store, runs_dir, queue.managed()):
        run = RunFolder(folder)
        status, spec = run.status() or {}, run.spec() or {}
        state = status.get("state")
        if state not in ("running", "queued"):
            ingest(folder)
            continue
        try:
            backend = queue.launcher.backend(spec)
            sweep = backend.reattach(run_id, folder, status)
        except (LaunchError, ClusterError) as error:
            log.warning("run %s is left %s: %s", run_id, state, error)
            continue
        if sweep is not None:
            queue.adopt(run_id, folder, backend.lane(run_id, spec), backend.queues_itself, sweep)
        elif state == "running":
            status = interrupted(status, backend.gone(status))
            if folder.is_relative_to(runs_dir):
                run.write_status(status)
                ingest(folder)
            else:
                ingest(folder)
                store.set_state(run_id, "interrupted", status["error"])
            interrupted_ids.append(run_id)
        elif folder.is_relative_to(runs_dir):
            queue.enqueue(run_id, folder, spec)
        else:
            ingest(folder)
    return interrupted_ids
