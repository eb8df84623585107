"""A sweep in which no point succeeded fails, naming the shared cause (issue 38): the rule on its own, the
real runner against a closed port, and what the job manager and the Run page then show."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from batchscope.ingest import ingest_run
from runners.results.outcome import ending
from tests.runner_helpers import read_status, run_runner
from tests.test_pages import home, no_traceback, open_page, texts  # noqa: F401 (home is a fixture)

REFUSED = "Unreachable: cannot reach http://127.0.0.1:9/v1/models: ClientConnectorError: Cannot connect"


def test_every_point_ok_or_none_run_is_done_without_a_note() -> None:
    assert ending([("ok", None), ("ok", None)]) == ("done", None)
    assert ending([]) == ("done", None)


def test_no_ok_point_fails_with_the_first_error_and_how_many_share_its_cause() -> None:
    state, error = ending([("error", "RuntimeError: all 4 requests failed"), ("error", "RuntimeError: all 8 requests "
                                                                                        "failed"),
                           ("oom", "OutOfMemoryError: CUDA out of memory")])
    assert state == "failed"
    assert error == ("no point succeeded; 2 of 3 failed with the first point's error: RuntimeError: all 4 requests "
                     "failed")
    assert ending([("error", REFUSED)]) == ("failed", f"no point succeeded; the only point failed: {REFUSED}")


def test_some_ok_points_stay_done_and_say_how_many_failed_and_why() -> None:
    assert ending([("ok", None), ("error", REFUSED)]) == ("done", f"1 of 2 points failed: {REFUSED}")
    assert ending([("ok", None), ("oom", "OutOfMemoryError: 2 GiB"), ("oom", "OutOfMemoryError: 4 GiB")]) == (
        "done", "2 of 3 points failed (2 with the first one's error): OutOfMemoryError: 2 GiB")


def closed_port() -> int:
    """A port nothing listens on: bound, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def unreachable(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """The real runner sweeping two concurrencies against a server that is not there."""
    out = tmp_path_factory.mktemp("runs") / "no-server"
    result = run_runner(out, "--model", "tiny", "--dtype", "float32", "--engine", "endpoint", "--url",
                        f"http://127.0.0.1:{closed_port()}/v1", "--concurrency", "1,2", "--num-requests", "4",
                        "--prompt-len", "fixed:8", "--output-len", "fixed:4", "--repeats", "1", "--warmup", "0")
    return out, result


def test_a_sweep_against_a_closed_port_fails_and_its_last_line_names_the_connection_failure(unreachable) -> None:
    out, result = unreachable
    status = read_status(out)
    assert result.returncode == 1, result.stderr
    assert status["state"] == "failed" and status["points_done"] == 2
    last = result.stderr.splitlines()[-1]
    assert last == f"failed: {out}: {status['error']}"
    assert last.startswith(f"failed: {out}: no point succeeded; 2 of 2 failed with the first point's error: "
                           f"Unreachable: cannot reach http://127.0.0.1:")
    assert "Cannot connect to host" in last


def test_the_run_page_and_the_job_state_say_the_sweep_failed_and_why(home, unreachable) -> None:
    from batchscope.jobs import JobManager

    out, _ = unreachable
    manager = JobManager.instance(*home)
    ingest_run(manager.store, out)
    progress = manager.progress(out.name)
    assert progress["state"] == "failed" and progress["error"].startswith("no point succeeded; 2 of 2")
    assert manager.store.runs()["state"].tolist() == ["failed"]
    at = open_page("app_pages/run.py", run=out.name)
    no_traceback(at)
    assert any(e.startswith("The sweep failed: no point succeeded; 2 of 2 failed with the first point's error: "
                            "Unreachable") for e in texts(at, "error")), texts(at, "error")

