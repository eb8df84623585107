"""The job manager with real `python -m runners sweep` subprocesses on the CPU tiny preset."""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from batchscope.backends.local import device_key, runner_alive
from batchscope.jobs import JobManager, make_run_id
from batchscope.runfolder import RunFolder
from runners.results.contract import parse_utc
from runners.spec import SpecError
from tests.runner_helpers import LONG, QUICK, RUN_TIMEOUT_S, until

def _summaries(folder: Path) -> int:
    return len(RunFolder(folder).complete_points())


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "history.duckdb", tmp_path / "runs"


@pytest.fixture
def manager(paths: tuple[Path, Path]) -> Iterator[JobManager]:
    opened = JobManager.instance(*paths)
    yield opened
    opened.shutdown()


def test_two_sweeps_go_queued_running_done_one_after_the_other(manager: JobManager, paths) -> None:
    assert JobManager.instance(*paths) is manager
    first = manager.submit({**QUICK, "name": "first"})
    second = manager.submit({**QUICK, "name": "second"})
    assert first.endswith(tuple("0123456789abcdef")) and "-first-" in first
    until(lambda: manager.active() == [first], what="first run to launch")
    assert manager.queue() == [second]
    waiting = manager.progress(second)
    assert (waiting["state"], waiting["queue_position"], waiting["points_total"]) == ("queued", 1, 2)

    states = []
    deadline = time.monotonic() + 2 * RUN_TIMEOUT_S
    while not states or states[-1] not in ("done", "failed", "cancelled", "interrupted"):
        assert time.monotonic() < deadline, f"second run stuck in {states}"
        state = manager.progress(second)["state"]
        if not states or states[-1] != state:
            states.append(state)
        time.sleep(0.05)
    assert states == ["queued", "running", "done"]

    assert manager.wait(first, RUN_TIMEOUT_S) == "done"
    assert manager.wait(second, RUN_TIMEOUT_S) == "done"
    first_status, second_status = manager.store.run(first)["status"], manager.store.run(second)["status"]
    assert parse_utc(second_status["started_at"]) >= parse_utc(first_status["finished_at"])
    points = manager.store.points([first, second])
    assert list(zip(points["run_id"], points["batch_size"])) == [(first, 1), (first, 2), (second, 1), (second, 2)]
    assert set(points["status"]) == {"ok"}
    second_points = points[points["run_id"] == second]  # batch 1 and 2, each over every measured run
    assert len(manager.store.requests(second)) == (second_points["batch_size"] * second_points["repeats"]).sum()
    assert manager.store.runs().set_index("run_id").loc[second, "points_ok"] == 2
    done = manager.progress(second)
    assert (done["points_done"], done["eta_s"], done["queue_position"]) == (2, None, None)
    assert done["elapsed_s"] > 0
    assert manager.queue() == [] and manager.active() == []


def test_cancel_drops_a_queued_run_and_stops_a_running_one_keeping_points(manager: JobManager) -> None:
    running = manager.submit(LONG)
    queued = manager.submit(QUICK)
    manager.cancel(queued)
    assert manager.wait(queued, 5) == "cancelled"
    assert sorted(p.name for p in (manager.runs_dir / queued).iterdir()) == ["spec.json", "status.json"]

    until(lambda: manager.progress(running)["points_done"] >= 1, what="a finished point")
    manager.cancel(running)
    assert manager.wait(running, RUN_TIMEOUT_S) == "cancelled"
    stored = manager.store.points([running])
    assert 1 <= len(stored) < len(LONG["batch_sizes"])
    assert len(stored) == _summaries(manager.runs_dir / running)
    assert not manager.store.requests(running, 0).empty
    assert manager.store.run(queued)["state"] == "cancelled"
    with pytest.raises(KeyError):
        manager.cancel("no-such-run")


def test_runner_killed_while_the_app_is_away_is_interrupted_on_restart(paths) -> None:
    before = JobManager.instance(*paths)
    run_id = before.submit(LONG)
    pid = until(lambda: before.progress(run_id)["points_done"] >= 1 and before.progress(run_id)["pid"],
                 what="a finished point")
    before.shutdown(cancel_running=False)  # the app goes away; the runner keeps going on its own
    os.kill(pid, signal.SIGKILL)
    until(lambda: not runner_alive(pid), timeout=10, what="the runner to die")
    assert RunFolder(before.runs_dir / run_id).status()["state"] == "running"

    after = JobManager.instance(*paths)
    try:
        run = after.store.run(run_id)
        assert run["state"] == "interrupted"
        assert f"runner process {pid} ended without finishing" in run["error"]
        assert RunFolder(after.runs_dir / run_id).status()["state"] == "interrupted"
        stored = after.store.points([run_id])
        assert 1 <= len(stored) == _summaries(after.runs_dir / run_id) < len(LONG["batch_sizes"])
        assert after.recover() == []
    finally:
        after.shutdown()


def test_runner_killed_under_a_live_manager_is_interrupted(manager: JobManager) -> None:
    run_id = manager.submit(LONG)
    pid = until(lambda: manager.progress(run_id)["points_done"] >= 1 and manager.progress(run_id)["pid"],
                 what="a finished point")
    os.kill(pid, signal.SIGKILL)
    assert manager.wait(run_id, 30) == "interrupted"
    run = manager.store.run(run_id)
    assert run["error"] == f"runner process {pid} killed by signal 9 without finishing"
    assert len(manager.store.points([run_id])) == _summaries(manager.runs_dir / run_id) >= 1


@pytest.mark.alone  # the adopted runner's sweep is timed against a bound
def test_restart_adopts_a_runner_that_is_still_going(paths) -> None:
    before = JobManager.instance(*paths)
    run_id = before.submit({**LONG, "batch_sizes": [1, 2, 4, 8]})
    until(lambda: before.progress(run_id)["state"] == "running", what="the runner to start")
    before.shutdown(cancel_running=False)

    after = JobManager.instance(*paths)
    try:
        assert after.active() == [run_id]
        assert after.wait(run_id, RUN_TIMEOUT_S) == "done"
        assert list(after.store.points([run_id])["batch_size"]) == [1, 2, 4, 8]
    finally:
        after.shutdown()


@pytest.mark.skipif(Path("/proc/driver/nvidia/gpus").is_dir(), reason="needs a machine without a GPU")
def test_spec_the_runner_rejects_fails_with_its_message(manager: JobManager) -> None:
    run_id = manager.submit({**QUICK, "device": "cuda"})
    assert manager.wait(run_id, RUN_TIMEOUT_S) == "failed"
    assert manager.store.run(run_id)["error"] == "device: CUDA was asked for but no CUDA device is visible"
    assert RunFolder(manager.runs_dir / run_id).status()["state"] == "failed"


def test_an_ingest_that_fails_once_neither_kills_the_lane_nor_loses_points(manager: JobManager, monkeypatch) -> None:
    from batchscope.jobs import follower as jobs

    real, calls = jobs.ingest_run, []

    def flaky(store, folder):
        calls.append(folder)
        if len(calls) == 1:
            raise RuntimeError("TransactionContext Error: simulated write conflict")
        return real(store, folder)

    monkeypatch.setattr(jobs, "ingest_run", flaky)
    first = manager.submit({**QUICK, "name": "flaky"})
    second = manager.submit({**QUICK, "name": "after"})
    assert manager.wait(first, RUN_TIMEOUT_S) == "done"
    assert manager.wait(second, RUN_TIMEOUT_S) == "done"  # the lane survived to launch the next run
    assert len(calls) > 1
    assert manager.store.point_indices(first) == {0, 1} and manager.store.point_indices(second) == {0, 1}


def test_a_failed_final_ingest_is_retried_so_the_run_still_settles(manager: JobManager, monkeypatch) -> None:
    from batchscope.jobs import follower as jobs

    real, failed = jobs.ingest_run, []

    def fails_at_the_end(store, folder):
        """Every ingest of the final status fails while the runner lives (so no watch poll carries it),
        and so does the first one after it is gone: only a retry in the settle can bring it in."""
        status = RunFolder(folder).status() or {}
        if status.get("state") == "done":
            gone = not runner_alive(status.get("pid"), folder.name)
            if not gone or not failed:
                failed.extend([folder] if gone else [])
                raise RuntimeError("simulated failure of the ingest that carries the final state")
        return real(store, folder)

    monkeypatch.setattr(jobs, "ingest_run", fails_at_the_end)
    run_id = manager.submit({**QUICK, "name": "late"})
    assert manager.wait(run_id, 60) == "done" and len(failed) == 1
    assert manager.store.point_indices(run_id) == {0, 1}


def test_a_run_is_unsettled_until_its_final_points_are_in_the_db(manager: JobManager, monkeypatch) -> None:
    """The runner writes `done` before it exits; until the manager has ingested that, progress says
    settled=False, so the Run page keeps refreshing instead of stopping at a page with no points."""
    import threading

    from batchscope.jobs import follower as jobs

    real, release = jobs.ingest_run, threading.Event()

    def held_at_the_end(store, folder):
        if (RunFolder(folder).status() or {}).get("state") == "done":
            release.wait(RUN_TIMEOUT_S)
        return real(store, folder)

    monkeypatch.setattr(jobs, "ingest_run", held_at_the_end)
    run_id = manager.submit({**QUICK, "name": "held"})
    until(lambda: manager.progress(run_id)["state"] == "done", what="the runner's own done")
    held = manager.progress(run_id)
    assert held["settled"] is False and manager.store.run(run_id)["state"] != "done"  # the DB lags
    release.set()
    assert manager.wait(run_id, RUN_TIMEOUT_S) == "done"
    assert manager.progress(run_id)["settled"] is True and manager.store.point_indices(run_id) == {0, 1}


def test_bad_spec_raises_and_writes_nothing(manager: JobManager) -> None:
    with pytest.raises(SpecError) as caught:
        manager.submit({**QUICK, "batch_sizes": [0, 2]})
    assert caught.value.field == "batch_sizes"
    with pytest.raises(SpecError):
        manager.submit({**QUICK, "model": ""})
    assert not manager.runs_dir.exists() or not any(manager.runs_dir.iterdir())
    assert manager.store.runs().empty and manager.queue() == []


def test_device_keys_and_run_ids() -> None:
    assert device_key("cpu") == "cpu"
    assert device_key("cuda") == device_key("cuda:0") == "cuda:0"
    assert device_key("cuda:3") == "cuda:3"
    moment = parse_utc("2026-11-29T07:15:00Z")
    run_id = make_run_id("/models/Llama 3.1 8B/", moment)
    assert run_id.startswith("20261129-071500-llama-3-1-8b-") and len(run_id) == len("20261129-071500-llama-3-1-8b-") + 6
    assert make_run_id("???", moment).startswith("20261129-071500-run-")
