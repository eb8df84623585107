"""The shipped H200 demo runs: imported once into a fresh history, never duplicated, removable."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from batchscope.demo import demo_folders, import_demo_runs
from batchscope.jobs import JobManager
from batchscope.store import Store
from tests.demo_helpers import DEMO, newest_demo_run_with_a_curve
from tests.runner_helpers import REPO


def test_demo_folders_are_real_gpu_runs():
    folders = demo_folders(DEMO)
    assert len(folders) >= 3
    for folder in folders:
        assert (folder / "env.json").read_text().count("H200") >= 1, folder
        assert list((folder / "points").glob("*.summary.parquet")), folder


def test_imported_once_marked_demo_and_never_duplicated(tmp_path: Path):
    store = Store(tmp_path / "h.duckdb")
    reports = import_demo_runs(store, DEMO)
    assert {r.run_id for r in reports} == {f.name for f in demo_folders(DEMO)}
    assert all(not r.warnings for r in reports)
    runs = store.runs()
    assert runs["demo"].all() and len(runs) == len(reports)
    points = len(store.points(runs["run_id"].tolist()))
    assert import_demo_runs(store, DEMO) == []                 # a second start does nothing
    assert import_demo_runs(store, DEMO, force=True)           # a forced import re-reads ...
    assert len(store.points(runs["run_id"].tolist())) == points  # ... and adds nothing twice
    store.close()


def test_a_deleted_demo_run_stays_deleted(tmp_path: Path):
    store = Store(tmp_path / "h.duckdb")
    import_demo_runs(store, DEMO)
    victim = store.runs()["run_id"].iloc[0]
    store.delete(victim)
    import_demo_runs(store, DEMO)
    assert victim not in store.runs()["run_id"].tolist()
    assert (DEMO / victim).is_dir()  # removing it from the history never touches the shipped folder
    store.close()


@pytest.fixture
def demo_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    db, runs = tmp_path / "history.duckdb", tmp_path / "runs"
    monkeypatch.setenv("BATCHSCOPE_DB", str(db))
    monkeypatch.setenv("BATCHSCOPE_RUNS", str(runs))
    monkeypatch.setenv("BATCHSCOPE_DEMO", str(DEMO))
    st.cache_resource.clear()
    yield
    manager = JobManager._instances.pop((db.resolve(), runs.resolve()), None)
    if manager is not None:
        manager.shutdown()
        manager.store.close()
    st.cache_resource.clear()


def test_first_start_shows_demo_runs_on_every_page(demo_home):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60).run()
    assert not at.exception
    home_text = " ".join(str(getattr(e, "label", "")) for e in at.main)
    assert "8B fast" in home_text or "1B fast" in home_text
    for page in ("app_pages/history.py", "app_pages/run.py"):
        at.switch_page(page)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
    at.switch_page("app_pages/run.py")
    at.query_params["run"] = "h200-fast-8b-bf16-chat"
    at.run()
    assert not at.exception
    headings = [e.value for kind in (at.title, at.header, at.subheader, at.markdown) for e in kind]
    assert any("8B fast" in text for text in headings), headings
    assert len(at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart")) >= 1  # the charts are drawn


def test_plain_run_page_and_home_open_the_latest_full_demo_run_not_the_one_point_one(demo_home):
    latest = newest_demo_run_with_a_curve()
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60).run()
    link = next(e for e in at.get("page_link") if e.proto.label == "Latest run with results")
    assert link.proto.query_string == f"run={latest}" and not link.proto.disabled
    at.switch_page("app_pages/run.py")
    at.run()
    assert not at.exception
    assert at.selectbox(key="run_select").value == latest
    assert at.query_params["run"] == latest
    sentences = " ".join(m.value for m in at.markdown)
    assert ("plateau" in sentences or "peak" in sentences) and "is recommended" in sentences  # its analysis


def test_every_shipped_run_opens_on_the_run_page_with_its_charts(demo_home):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60).run()
    at.switch_page("app_pages/run.py")
    for folder in demo_folders(DEMO):
        at.query_params["run"] = folder.name
        at.run()
        assert not at.exception, (folder.name, [e.value for e in at.exception])
        assert at.selectbox(key="run_select").value == folder.name
        assert len(at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart")) >= 1, folder.name
        assert not at.error, (folder.name, [e.value for e in at.error])


def test_the_readme_shows_every_screenshot_of_the_demo_set_and_nothing_else():
    """bench/readme_shots.py makes the README's pictures from runs in data/demo: each is in docs/img and shown,
    and the README shows no picture the script does not make (one left behind would go stale)."""
    spec = importlib.util.spec_from_file_location("readme_shots", REPO / "bench" / "readme_shots.py")
    shots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shots)
    shown = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", (REPO / "README.md").read_text())
    assert sorted(shown) == sorted(f"docs/img/{name}" for name in shots.SHOTS)
    assert all((REPO / path).stat().st_size > 10_000 for path in shown)
    assert shots.missing_runs(DEMO) == []


def test_history_on_a_first_start_offers_the_demo_overlay_in_one_click(demo_home):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60).run()
    at.switch_page("app_pages/history.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.multiselect(key="overlay_runs").value == []
    assert not (at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart"))  # nothing drawn before the click
    offer = at.button(key="overlay_default")
    assert "1B fast" in offer.label and "8B fast" in offer.label
    offer.click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.multiselect(key="overlay_runs").value == ["h200-fast-1b-bf16-chat", "h200-fast-8b-bf16-chat"]
    assert len(at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart")) >= 1


def test_a_demo_run_with_an_oom_says_which_batch_in_a_few_words_at_the_top(demo_home):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60).run()
    at.switch_page("app_pages/run.py")
    at.query_params["run"] = "h200-fast-8b-bf16-chat"
    at.run()
    shown = [w.value.replace("\\", "") for w in at.warning]  # plain() escapes Markdown
    assert shown == ["The sweep finished, but 1 of 8 points failed: batch 128, out of memory: needed 23.10 GiB more, "
                   "8.17 GiB of 139.80 GiB free"]  # by hand from its p0007 error; PyTorch's advice stays below
