"""The run report opens with no network: the shipped 8B chat run's report from the Run page (its linked charts)
and from Explain (every step's chart), written to a file and opened in headless Chromium offline, where every
chart must be drawn with its marks and no request may leave the file. Screenshots: test-artifacts/report-*.png.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from batchscope import charts, export
from batchscope.demo import import_demo_runs
from batchscope.report import Report
from batchscope.store import Store
from batchscope.ui import explain_view
from batchscope.ui.run_view import load_run
from tests.runner_helpers import REPO
from tests.test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS

playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.browser
RUN = "h200-fast-8b-bf16-chat"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int]]:
    """The Run page's and Explain's report of the 8B chat run, as files, with how many charts each holds."""
    folder = tmp_path_factory.mktemp("reports")
    with Store(folder / "history.duckdb") as store:
        import_demo_runs(store, REPO / "data" / "demo")
        data = load_run(store, RUN, None)
        spec = charts.linked_charts(data.table, data.analysis, memory_split=data.split, run=data.run["name"],
                                    per_gpu=data.per_gpu)
        steps = explain_view.walk(data, store.runs(), lambda rid: load_run(store, rid, None),
                                  lambda rid: (store.run(rid) or {}).get("spec"), None)
        built = {"run": [export.Figure(export.RUN_CHARTS, spec)], "explain": export.step_figures(steps)}
    found = {}
    for name, figures in built.items():
        path = folder / f"{name}.html"
        path.write_text(export.report_html(Report(data.run, data.analysis), figures), encoding="utf-8")
        found[name] = (path, len(figures))
    return found


@pytest.mark.parametrize("name", ["run", "explain"])
def test_the_report_shows_every_chart_with_the_network_off(reports, name: str) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed")
    path, count = reports[name]
    assert count >= (1 if name == "run" else 6)
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        context.set_offline(True)
        left: list[str] = []
        context.route("**/*", lambda route: (left.append(route.request.url), route.abort()) if
                      not route.request.url.startswith("file://") else route.continue_())
        tab = context.new_page()
        problems: list[str] = []
        tab.on("pageerror", lambda error: problems.append(str(error)))
        tab.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
        tab.goto(path.as_uri())
        tab.wait_for_selector(f"body[{export.DRAWN}='{count}']", timeout=60_000)
        marks = tab.evaluate("""n => Array.from({length: n}, (_, i) =>
            document.querySelectorAll(`#chart-${i} svg .role-mark path, #chart-${i} svg .role-mark line`).length)""",
                             count)
        ARTIFACTS.mkdir(exist_ok=True)
        tab.screenshot(path=str(ARTIFACTS / f"report-{name}.png"), full_page=True)
        text = tab.inner_text("body")
        browser.close()
    assert all(drawn > 0 for drawn in marks), marks
    assert not left and not problems, (left, problems)
    assert "Markers" in text and "Points" in text and "could not be drawn" not in text
