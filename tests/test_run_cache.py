"""The analysed-run cache: a live run that gains a point (or changes state) is analysed again, an unchanged
run is not, whatever the page redraws."""
from __future__ import annotations

from pathlib import Path

import pytest

from batchscope.analysis import SLO
from batchscope.ingest import ingest_run
from batchscope.store import Store
from batchscope.ui import run_view
from batchscope.ui.run_cache import RunCache
from tests.test_ingest import _write_point, make_run_folder


@pytest.fixture
def analyses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every analysis the cache asks for (one entry per call: its number of points)."""
    calls: list[int] = []
    real = run_view.analyse

    def counted(points, *args, **kwargs):
        calls.append(len(points))
        return real(points, *args, **kwargs)

    monkeypatch.setattr(run_view, "analyse", counted)
    return calls


@pytest.fixture
def live_run(tmp_path: Path) -> tuple[Store, Path]:
    """A running run with two of its three points stored."""
    folder = make_run_folder(tmp_path, "live", batch_sizes=(1, 2, 4), state="running")
    (folder / "points" / "p0002.summary.parquet").unlink()
    (folder / "model.json").unlink()  # its hand-made facts are too few for a roofline, which is not tested here
    store = Store(tmp_path / "history.duckdb")
    assert ingest_run(store, folder).points_added == 2
    yield store, folder
    store.close()


def test_an_unchanged_run_is_analysed_once_however_often_it_is_drawn(live_run, analyses) -> None:
    store, _ = live_run
    cache = RunCache()
    first = cache.load(store, "live", None)
    for _ in range(5):
        again = cache.load(store, "live", None)
    assert analyses == [2]
    assert again.analysis is first.analysis and len(again.table) == 2


def test_a_run_that_gains_a_point_or_ends_is_analysed_again(live_run, analyses) -> None:
    store, folder = live_run
    cache = RunCache()
    cache.load(store, "live", None)
    _write_point(folder, 2, 4)
    assert ingest_run(store, folder).points_added == 1
    grown = cache.load(store, "live", None)
    assert analyses == [2, 3] and grown.table["batch_size"].tolist() == [1, 2, 4]
    store.set_state("live", "done")
    assert cache.load(store, "live", None).run["state"] == "done"
    cache.load(store, "live", None)
    assert analyses == [2, 3, 3]


def test_each_slo_has_its_own_analysis_and_a_rename_needs_none(live_run, analyses) -> None:
    store, _ = live_run
    cache = RunCache()
    slo = SLO("ttft", 50, 100.0)
    assert cache.load(store, "live", slo).analysis.slo == slo
    assert cache.load(store, "live", None).analysis.slo is None
    cache.load(store, "live", slo)
    assert analyses == [2, 2]
    store.rename("live", "renamed")
    assert cache.load(store, "live", slo).run["name"] == "renamed"  # the record is read fresh
    assert analyses == [2, 2]
    assert cache.load(store, "no-such-run", slo) is None


def test_the_cache_keeps_at_most_its_size_and_one_version_per_run(live_run, analyses) -> None:
    store, folder = live_run
    cache = RunCache(size=2)
    for ms in (100.0, 200.0, 300.0):
        cache.load(store, "live", SLO("ttft", 50, ms))
    cache.load(store, "live", SLO("ttft", 50, 100.0))  # pushed out by the third
    assert len(analyses) == 4 and len(cache._entries) == 2
    _write_point(folder, 2, 4)
    ingest_run(store, folder)
    cache.load(store, "live", SLO("ttft", 50, 100.0))
    assert len(cache._entries) == 2
    assert sum(key[2] == SLO("ttft", 50, 100.0) for key in cache._entries) == 1  # the old version went


def test_sessions_asking_for_the_same_run_at_once_share_one_analysis(live_run, monkeypatch) -> None:
    """Home analyses ahead in a thread while a page may ask for the same run: one analysis serves both."""
    import threading
    import time

    store, _ = live_run
    calls: list[int] = []
    real = run_view.analyse

    def slow(points, *args, **kwargs):
        calls.append(len(points))
        time.sleep(0.3)
        return real(points, *args, **kwargs)

    monkeypatch.setattr(run_view, "analyse", slow)
    cache = RunCache()
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.load(store, "live", None))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == [2] and len({id(r.analysis) for r in results}) == 1
