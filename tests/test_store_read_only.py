"""A history DB this process cannot write (issue 38) opens read-only for browsing: the report CLI, the
runs list and every page read it, and whatever would write is refused or switched off, saying why.

The file and its folder are made truly unwritable: `chattr +i` as root (root passes permission bits, not an
immutable flag), plain permissions otherwise; both refuse the read-write open the store used to try."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest
import streamlit as st

from batchscope.ingest import ingest_run
from batchscope.migrations import CURRENT_VERSION, migrate
from batchscope.store import Store
from batchscope.store_file import StoreUnavailableError, read_only_reason
from tests.runner_helpers import REPO
from tests.test_pages import home, no_traceback, open_page, texts  # noqa: F401 (home is a fixture)

RUN = REPO / "data" / "demo" / "h200-fast-1b-fp16-long"


@contextmanager
def unwritable(*paths: Path) -> Iterator[None]:
    """The paths cannot be written by this process (nor by its children) until the block ends."""
    if os.geteuid() == 0:
        made = subprocess.run(["chattr", "+i", *map(str, paths)], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"root ignores permissions and chattr +i is not available here: {made.stderr.strip()}")
        undo = ["chattr", "-i", *map(str, paths)]
    else:
        modes = {path: path.stat().st_mode for path in paths}
        for path in paths:
            path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        yield
    finally:
        if os.geteuid() == 0:
            subprocess.run(undo, check=True)
        else:
            for path, mode in modes.items():
                path.chmod(mode)


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """A history DB holding one real run, in a folder of its own."""
    db = tmp_path / "archive" / "history.duckdb"
    with Store(db) as store:
        ingest_run(store, RUN)
    return db


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "batchscope", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_report_runs_and_export_read_a_store_on_a_read_only_path_and_an_import_is_refused(archive: Path) -> None:
    before = digest(archive.parent)
    with unwritable(archive, archive.parent):
        reason = read_only_reason(archive)  # what the store reads: refused for root too
        report = cli("report", RUN.name, "--db", str(archive), "--format", "json")
        listed = cli("runs", "--db", str(archive), "--format", "json")
        imported = cli("import", str(RUN), "--db", str(archive))
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["run"]["run_id"] == RUN.name
    assert listed.returncode == 0 and [r["run_id"] for r in json.loads(listed.stdout)] == [RUN.name]
    assert reason and imported.returncode == 1
    assert imported.stderr.strip() == f"error: {reason}", imported.stderr
    assert digest(archive.parent) == before  # not a byte changed, no write-ahead log left


def test_a_read_only_store_reads_and_refuses_every_write_saying_why(archive: Path) -> None:
    with Store(archive) as store:
        name = store.run(RUN.name)["name"]
    with unwritable(archive, archive.parent), Store(archive) as store:
        assert store.read_only and str(archive) in store.read_only
        assert store.runs()["run_id"].tolist() == [RUN.name] and not store.points([RUN.name]).empty
        for write in (lambda: store.set_setting("k", "v"), lambda: store.rename(RUN.name, "x"),
                      lambda: store.delete(RUN.name), lambda: ingest_run(store, RUN)):
            with pytest.raises(StoreUnavailableError, match="open for browsing only"):
                write()
    with Store(archive) as store:  # writable again: opened for writing, the run untouched
        assert store.read_only is None and store.run(RUN.name)["name"] == name


def test_pages_browse_a_read_only_history_with_every_write_switched_off(home: tuple[Path, Path]) -> None:
    db = home[0]
    with Store(db) as store:
        ingest_run(store, RUN)
    st.cache_resource.clear()
    with unwritable(db, db.parent):
        pages = {page: open_page(page, **({"run": RUN.name} if page.endswith("run.py") else {}))
                 for page in ("app_pages/history.py", "app_pages/run.py", "app_pages/new_sweep.py")}
    for page, at in pages.items():
        no_traceback(at)
        assert any("open for browsing only" in text for text in texts(at, "info")), (page, texts(at, "info"))
    history, run, new_sweep = pages.values()
    for key in ("import_button", "rename_button", "delete_button"):
        assert history.button(key).disabled and "open for browsing only" in history.button(key).proto.help
    assert RUN.name in history.dataframe[0].value.to_csv()
    assert run.get("download_button") and not texts(run, "error")
    price = [n for n in run.number_input if n.label.startswith("Price per GPU-hour")]
    assert price and price[0].disabled
    assert new_sweep.button("launch").disabled and "open for browsing only" in new_sweep.button("launch").proto.help


def test_a_read_only_store_of_an_older_schema_says_to_copy_it_somewhere_writable(tmp_path: Path) -> None:
    """It cannot be migrated where it lies, and an unmigrated store would fail on its first newer column."""
    db = tmp_path / "old" / "history.duckdb"
    db.parent.mkdir()
    con = duckdb.connect(str(db))
    migrate(con, CURRENT_VERSION - 1)
    con.close()
    with unwritable(db, db.parent), pytest.raises(StoreUnavailableError) as refused:
        Store(db)
    assert str(refused.value) == (f"{db} is read-only and at schema version {CURRENT_VERSION - 1}, older than this "
                                  f"BatchScope's {CURRENT_VERSION}: copy it somewhere writable to upgrade it")
