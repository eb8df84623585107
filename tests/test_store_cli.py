"""`python -m batchscope import|runs|report` as a user runs it, on a folder the real runner wrote."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from batchscope.cli import main
from batchscope.migrations import CURRENT_VERSION
from tests.db_helpers import dump_tables

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
         "--repeats", "1", "--warmup", "0", "--no-calibrate"],
        cwd=REPO, capture_output=True, text=True, timeout=180)
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


def test_db_held_by_another_process_is_exit_1(runner_folder: Path, tmp_path: Path) -> None:
    db = tmp_path / "held.duckdb"
    holder = duckdb.connect(str(db))  # this test process plays the running app
    try:
        result = _cli("import", str(runner_folder), "--db", str(db))
    finally:
        holder.close()
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("error: cannot use the database (") and line.endswith("is the app running on it?")


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

