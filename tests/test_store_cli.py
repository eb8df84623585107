"""`python -m batchscope import|runs|report` as a user runs it, on a folder the real runner wrote."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from batchscope.cli import main
from batchscope.migrations import CURRENT_VERSION
from batchscope.store_file import locked_words
from tests.db_helpers import dump_tables
from tests.runner_helpers import SEVEN_POINTS, read_status, start_runner, wait_for_points

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "batchscope", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)



@pytest.fixture(scope="module")
def runner_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder made by the real runner, as a headless GPU host would hand it over."""
    out = tmp_path_factory.mktemp("headless") / "20261129-071500-tiny-3fa2c1"
    done = subprocess.run(
        [sys.executable, "-m", "runners", "sweep", "--out", str(out), "--model", "tiny", "--dtype", "float32",
         "--device", "cpu", "--batch-sizes", "1,2", "--prompt-len", "fixed:16", "--output-len", "fixed:4",
         "--repeats", "1", "--warmup", "0", "--replays", "0", "--target-interval", "0", "--no-calibrate"],
        cwd=REPO, capture_output=True, text=True, timeout=180)  # one run a point: its requests are counted below
    assert done.returncode == 0, done.stderr
    return out


def test_import_twice_changes_nothing_and_runs_lists_it(runner_folder: Path, tmp_path: Path) -> None:
    db = tmp_path / "history.duckdb"
    first = _cli("import", str(runner_folder), "--db", str(db))
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"{runner_folder.name}: 2 new point(s), state done\n"
    before = dump_tables(db)
    assert len(before["points"]) == 2 and len(before["requests"]) == 1 + 2

    second = _cli("import", str(runner_folder), "--db", str(db))
    assert (second.returncode, second.stdout, second.stderr) == (
        0, f"{runner_folder.name}: 0 new point(s), state done\n", "")
    assert dump_tables(db) == before

    listed = _cli("runs", "--db", str(db), "--format", "json")
    assert listed.returncode == 0, listed.stderr
    [run] = json.loads(listed.stdout)
    assert (run["run_id"], run["state"], run["points"], run["points_ok"], run["model"]) == (
        runner_folder.name, "done", 2, 2, "tiny")
    assert "torch" in run["fingerprint"]
    table = _cli("runs", "--db", str(db))
    header, row = table.stdout.splitlines()
    assert header.split()[:3] == ["run_id", "name", "state"]
    assert row.split()[:3] == [runner_folder.name, runner_folder.name, "done"]


def test_truncated_file_is_imported_around_with_a_warning(runner_folder: Path, tmp_path: Path) -> None:
    copy = tmp_path / runner_folder.name
    shutil.copytree(runner_folder, copy)
    broken = copy / "points" / "p0001.summary.parquet"
    broken.write_bytes(broken.read_bytes()[:100])
    result = _cli("import", str(copy), "--db", str(tmp_path / "h.duckdb"))
    assert result.returncode == 0
    assert result.stdout == f"{copy.name}: 1 new point(s), state done\n"
    [warning] = result.stderr.splitlines()
    assert warning.startswith(f"warning: {broken}: unreadable Parquet")


@pytest.mark.parametrize("args, message", [
    (["import", "/no/such/run"], "error: /no/such/run: no such directory"),
    (["runs", "--format", "xml"], "error: argument --format: invalid choice: 'xml' (choose from 'table', 'json') "
                                  "(see: python -m batchscope runs --help)"),
    (["frobnicate"], "error: argument command: invalid choice: 'frobnicate' (choose from 'import', 'runs', 'report') "
                     "(see: python -m batchscope --help)"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*args, *(["--db", str(tmp_path / "h.duckdb")] if args[0] == "import" else [])]) == 2
    assert capsys.readouterr().err == message + "\n"
    assert not (tmp_path / "h.duckdb").exists()


def test_not_a_run_folder_and_missing_db_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", str(tmp_path), "--db", str(tmp_path / "h.duckdb")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path}: not a run folder (it has no spec.json or status.json)\n"
    assert main(["runs", "--db", str(tmp_path / "absent.duckdb")]) == 2
    assert capsys.readouterr().err == f"error: no database at {tmp_path / 'absent.duckdb'}\n"


def test_db_held_by_another_process_is_exit_1(runner_folder: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the wait is over, the line names no other process's executable or pid: how to find it instead."""
    db = tmp_path / "held.duckdb"
    monkeypatch.setenv("BATCHSCOPE_DB_WAIT_S", "0.5")
    holder = duckdb.connect(str(db))  # this test process plays the running app
    try:
        result = _cli("import", str(runner_folder), "--db", str(db))
    finally:
        holder.close()
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line == f"error: {locked_words(db)}"
    assert f"lsof {db}" in line and str(os.getpid()) not in line and "python" not in line


def test_report_is_dispatched_to_the_analysis_cli(runner_folder: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "history.duckdb"
    assert main(["import", str(runner_folder), "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["report", runner_folder.name, "--db", str(db), "--format", "json"]) == 0
    assert runner_folder.name in capsys.readouterr().out
    assert main(["report", "no-such-run", "--db", str(db)]) == 2
    assert "no-such-run" in capsys.readouterr().err


def test_a_db_from_a_newer_batchscope_is_one_line_and_exit_1(runner_folder: Path, tmp_path: Path) -> None:
    db = tmp_path / "newer.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP)")
    con.execute("INSERT INTO schema_version VALUES (99, now())")
    con.close()
    before = db.read_bytes()
    for args in (["import", str(runner_folder)], ["runs"], ["report", runner_folder.name]):
        result = _cli(*args, "--db", str(db))
        assert result.returncode == 1, (args, result.stderr)
        [line] = result.stderr.splitlines()
        assert line == (f"error: {db} was written by a newer BatchScope (schema version 99; this one knows up to "
                        f"{CURRENT_VERSION}); open it with that version or pass another --db"), line
    assert db.read_bytes() == before


def test_import_marks_a_run_whose_runner_was_killed_interrupted(tmp_path: Path) -> None:
    """kill -9 of a headless runner leaves status.json `running`; `import` must not store it so forever."""
    out = tmp_path / "20261130-120000-tiny-killed"
    proc = start_runner(out, *SEVEN_POINTS)
    wait_for_points(out, 1)
    proc.kill()
    proc.wait(timeout=30)
    assert read_status(out)["state"] == "running"
    db = tmp_path / "h.duckdb"
    result = _cli("import", str(out), "--db", str(db))
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("state interrupted\n"), result.stdout
    [run] = json.loads(_cli("runs", "--db", str(db), "--format", "json").stdout)
    assert run["state"] == "interrupted" and run["points"] >= 1
    assert run["error"] == f"runner process {proc.pid} ended without finishing (last heartbeat " \
                          f"{read_status(out)['heartbeat_at']})"
    assert read_status(out)["state"] == "running"  # a folder made elsewhere is read, never written


def test_one_bad_file_in_one_folder_does_not_stop_the_import_of_the_others(runner_folder: Path,
                                                                           tmp_path: Path) -> None:
    """Copies of a good run, each with one bad file: a wrong-typed status field is dropped, a summary whose
    index no point can have is skipped, a run the DB cannot take is left out; each says so, the rest is stored."""
    bad = {}
    for name, file, field, value in (("pid", "status.json", "pid", 1e20),
                                     ("points-done", "status.json", "points_done", "abc"),
                                     ("gpu-memory", "env.json", "gpu_memory_bytes", "abc"),
                                     ("point-index", None, None, None)):
        copy = tmp_path / f"{runner_folder.name}-{name}"
        shutil.copytree(runner_folder, copy)
        if file is None:
            (copy / "points" / "p0001.summary.parquet").rename(copy / "points" / "p99999999999.summary.parquet")
        else:
            record = json.loads((copy / file).read_text())
            (copy / file).write_text(json.dumps({**record, field: value}))
        bad[name] = copy
    db = tmp_path / "h.duckdb"
    result = _cli("import", *map(str, bad.values()), str(runner_folder), "--db", str(db))
    assert result.returncode == 0, result.stderr
    warnings = result.stderr.splitlines()
    assert len(warnings) == 4 and all(w.startswith("warning: ") for w in warnings), warnings
    assert f"warning: {bad['pid'] / 'status.json'}: pid 1e+20 is not a process id; ignored" in warnings, warnings
    assert f"warning: {bad['points-done'] / 'status.json'}: points_done 'abc' is not a count; ignored" in warnings
    assert any(w.startswith(f"warning: {bad['gpu-memory']}: run not stored (Conversion Error") for w in warnings)
    assert (f"warning: {bad['point-index'] / 'points' / 'p99999999999.summary.parquet'}: point index 99999999999 "
            f"is past the largest a run can have; skipped") in warnings, warnings
    runs = {run["run_id"]: run for run in json.loads(_cli("runs", "--db", str(db), "--format", "json").stdout)}
    assert {run_id: (run["state"], run["points"]) for run_id, run in runs.items()} == {
        runner_folder.name: ("done", 2), bad["pid"].name: ("done", 2), bad["points-done"].name: ("done", 2),
        bad["point-index"].name: ("done", 1)}
