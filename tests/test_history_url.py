"""History's overlay lives in the URL (runs, latency metric, SLO) and comes back after a reload or a visit to
another page; the side by side says which values each overlaid run lacks. Through Streamlit's AppTest on real
tiny CPU runs."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from batchscope.ingest import ingest_run
from tests.test_pages import home, manager, no_traceback, open_page, texts  # noqa: F401 (fixtures)


def two_runs(home, tiny_run: Path, tmp_path: Path) -> None:  # noqa: F811
    """tiny-cpu (batches 1, 2, 4) and a copy of it without its batch-4 point."""
    store = manager(home).store
    ingest_run(store, tiny_run)
    short = tmp_path / "tiny-cpu-short"
    shutil.copytree(tiny_run, short)
    spec = json.loads((short / "spec.json").read_text())
    (short / "spec.json").write_text(json.dumps({**spec, "run_id": "tiny-cpu-short", "name": "short"}))
    for part in (short / "points").glob("p0002.*"):
        part.unlink()
    ingest_run(store, short)


def test_the_overlay_is_read_from_and_written_to_the_url_and_survives_a_reload(home, tiny_run: Path,  # noqa: F811
                                                                                tmp_path: Path) -> None:
    two_runs(home, tiny_run, tmp_path)
    page = open_page("app_pages/history.py", runs="tiny-cpu,tiny-cpu-short,deleted-run", latency="e2e:99")
    no_traceback(page)
    assert page.multiselect(key="overlay_runs").value == ["tiny-cpu", "tiny-cpu-short"]  # an unknown id selects nothing
    assert page.selectbox(key="history_slo_metric").value == "e2e"
    assert page.selectbox(key="history_slo_percentile").value == 99
    captions = " ".join(texts(page, "caption"))
    assert "lacks batch 4." in captions and "compared over the 2 batch values every run measured (1, 2)" in captions
    side = page.dataframe[-1].value
    assert "P95 E2E ms at working point" in side.columns and "output tok/s at working point" in side.columns
    assert not side.isin(["None", "—"]).any().any()
    page.multiselect(key="overlay_runs").set_value(["tiny-cpu"]).run()
    page.toggle(key="history_slo_on").set_value(True).run()
    no_traceback(page)
    assert page.query_params["runs"] == ["tiny-cpu"] or page.query_params["runs"] == "tiny-cpu"
    url = {key: page.query_params[key] for key in ("runs", "latency", "slo")}
    assert {k: v if isinstance(v, str) else v[0] for k, v in url.items()}["slo"].startswith("e2e:99:")
    reloaded = open_page("app_pages/history.py", **{k: v if isinstance(v, str) else v[0] for k, v in url.items()})
    no_traceback(reloaded)
    assert reloaded.multiselect(key="overlay_runs").value == ["tiny-cpu"]
    assert reloaded.toggle(key="history_slo_on").value and reloaded.selectbox(key="history_slo_metric").value == "e2e"


def test_the_overlay_comes_back_after_a_visit_to_another_page(home, tiny_run: Path, tmp_path: Path) -> None:  # noqa: F811
    two_runs(home, tiny_run, tmp_path)
    page = open_page("app_pages/history.py")
    page.multiselect(key="overlay_runs").set_value(["tiny-cpu-short", "tiny-cpu"]).run()
    page.toggle(key="history_slo_on").set_value(True).run()
    no_traceback(page)
    page.switch_page("app_pages/new_sweep.py")
    for key in list(page.query_params):  # another page's URL has no overlay in it
        del page.query_params[key]
    page.run()
    page.switch_page("app_pages/history.py")
    page.run()
    no_traceback(page)
    assert page.multiselect(key="overlay_runs").value == ["tiny-cpu-short", "tiny-cpu"]
    assert page.toggle(key="history_slo_on").value
