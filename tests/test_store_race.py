"""Two processes at one new history DB at the same moment (issue 38): imports racing into a new store, two
job managers racing to make theirs and each submit a sweep, and what another process's hold on the file
looks like in the browser."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from batchscope.store import Store
from batchscope.store_file import locked_words
from tests.runner_helpers import QUICK, REPO, RUN_TIMEOUT_S
from tests.test_pages import home, no_traceback, open_page, texts  # noqa: F401 (home is a fixture)

ROUNDS = 20
DEMO = REPO / "data" / "demo"
FOLDERS = (DEMO / "h200-fast-1b-fp16-long", DEMO / "h200-fast-8b-fp16-long")
# Each racer loads BatchScope once, then for every round says it is ready, waits for the word and runs its
# command against that round's new DB, so both reach the same missing file within a millisecond or so.
RACER = """
import json, sys, time
from pathlib import Path
from batchscope.cli import main
from batchscope.jobs import JobManager
flag, rounds, kind, payload = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
for r in range(rounds):
    flag.with_name(f"ready-{r}-{flag.name}").touch()
    while not flag.with_name(f"go-{r}").exists():
        time.sleep(0.0005)
    db = flag.with_name(f"round-{r}.duckdb")
    if kind == "import":
        print("round", r, main(["import", payload, "--db", str(db)]), flush=True)
    else:
        manager = JobManager.instance(db, flag.with_name(f"runs-{flag.name}"))
        run_id = manager.submit(json.loads(payload))
        print("round", r, manager.wait(run_id, 600), run_id, flush=True)
        manager.shutdown()
"""


def race(tmp_path: Path, rounds: int, kind: str, payloads: tuple[str, str], env: dict[str, str] | None = None
         ) -> list[list[str]]:
    """Start two racers, give the word for each round once both are ready; each racer's round lines."""
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path / name), str(rounds), kind, payload],
                               cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for name, payload in zip(("a", "b"), payloads)]
    try:
        for r in range(rounds):
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while not all((tmp_path / f"ready-{r}-{name}").exists() for name in "ab"):
                assert time.monotonic() < deadline and all(p.poll() is None for p in racers), \
                    [p.stderr.read() for p in racers if p.poll() is not None]
                time.sleep(0.005)
            (tmp_path / f"go-{r}").touch()
        outs = [p.communicate(timeout=RUN_TIMEOUT_S * 2) for p in racers]
    finally:
        for p in racers:
            p.kill() if p.poll() is None else None
    for p, (_, err) in zip(racers, outs):
        assert p.returncode == 0, err
    return [[line for line in out.splitlines() if line.startswith("round ")] for out, _ in outs]


def test_two_imports_into_one_new_store_at_the_same_moment_both_succeed_every_time(tmp_path: Path) -> None:
    lines = race(tmp_path, ROUNDS, "import", tuple(str(f) for f in FOLDERS))
    assert lines[0] == lines[1] == [f"round {r} 0" for r in range(ROUNDS)]
    for r in range(ROUNDS):
        with Store(tmp_path / f"round-{r}.duckdb") as store:
            assert sorted(store.runs()["run_id"]) == sorted(f.name for f in FOLDERS)
    assert not list(tmp_path.glob(".*.tmp*"))  # every loser's own new file is gone


def test_two_job_managers_racing_to_make_their_store_both_submit_and_finish_their_sweeps(tmp_path: Path) -> None:
    """The one that loses waits for the winner to let go of the file, then submits its own sweep."""
    env = {**os.environ, "BATCHSCOPE_DB_WAIT_S": "600"}
    specs = tuple(json.dumps({**QUICK, "name": name}) for name in ("racer-a", "racer-b"))
    lines = race(tmp_path, 1, "jobs", specs, env)
    run_ids = []
    for out in lines:
        [line] = out
        _, index, state, run_id = line.split()
        assert (index, state) == ("0", "done"), line
        run_ids.append(run_id)
    with Store(tmp_path / "round-0.duckdb") as store:
        runs = store.runs()
    assert sorted(runs["run_id"]) == sorted(run_ids) and set(runs["state"]) == {"done"}
    assert sorted(runs["name"]) == ["racer-a", "racer-b"]


@pytest.fixture
def held(home: tuple[Path, Path]) -> Iterator[subprocess.Popen]:
    """Another process holding the app's history DB, as a second BatchScope would."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom batchscope.store import Store\n"
                               f"store = Store({str(home[0])!r})\nprint('held', flush=True)\ntime.sleep(600)"],
                              cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    yield holder
    holder.kill()
    holder.wait()


def test_the_browser_says_another_batchscope_holds_the_store_and_how_to_find_it_never_its_pid(
        home: tuple[Path, Path], held: subprocess.Popen, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHSCOPE_DB_WAIT_S", "0.3")
    at = open_page("app_pages/history.py")
    no_traceback(at)
    errors = texts(at, "error")
    assert locked_words(home[0]) in errors, errors
    shown = " ".join(errors + texts(at, "markdown") + texts(at, "caption"))
    assert str(held.pid) not in shown and "python" not in shown.lower()
