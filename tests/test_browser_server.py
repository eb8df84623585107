"""A clean server: `streamlit run serve.py` with the shipped .streamlit/config.toml, every page opened by its own
link in headless Chromium and widened from 1440 to 1920 px once drawn; the server log must hold no file-watcher
(inotify) lines and no traceback, no request may fail and the browser's console must hold no error or warning.

Served as `app.py` alone, Streamlit's front end opened at `/history` first probes `/history/_stcore/health` and
`/history/_stcore/host-config` (two 404s, two console errors, streamlit/streamlit#7074); serve.py's index page
tells it the server's base (batchscope/page_base.py), so no page asks anything under its own path.
"""
from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runner_helpers import REPO
from tests.test_browser import CHART, CHROMIUM, CHROMIUM_ARGS, app_process

playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.browser
PAGES = {"": CHART + " svg", "run": CHART + " svg", "history": '[data-testid="stDataFrame"]', "explain": CHART + " svg",
         "explain?present=1": CHART + " svg", "new_sweep": 'h1:has-text("New sweep")'}
DEEP_LINK_PROBE = re.compile(r"^/(run|history|explain|new_sweep)/_stcore/")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The app on a fresh history, and its log file."""
    with app_process(tmp_path) as (url, _):
        yield url, tmp_path / "streamlit.log"


def test_the_shipped_config_watches_no_files() -> None:
    server = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())["server"]
    assert server["fileWatcherType"] == "none" and server["runOnSave"] is False


def test_every_page_opened_by_its_link_leaves_a_clean_log_fails_no_request_and_warns_of_nothing(served) -> None:
    url, log = served
    failed: list[tuple[int, str]] = []
    answered: dict[str, int] = {}
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        tab = browser.new_page(viewport={"width": 1440, "height": 900})
        errors: list[str] = []
        tab.on("pageerror", lambda error: errors.append(str(error)))
        console: list[tuple[str, str]] = []  # errors and warnings (Vega logs its own as warnings)
        tab.on("console", lambda message: console.append((message.text, message.location.get("url", "")))
               if message.type in ("error", "warning") else None)

        def seen(response) -> None:
            path = response.url.removeprefix(url)
            answered[path] = response.status
            if response.status >= 400:
                failed.append((response.status, path))

        tab.on("response", seen)
        tab.goto(url)
        tab.get_by_role("heading", name="BatchScope").wait_for(timeout=60_000)
        for page, ready in PAGES.items():
            tab.set_viewport_size({"width": 1440, "height": 900})
            tab.goto(f"{url}/{page}")
            tab.locator(ready).first.wait_for(timeout=60_000)
            # a wider window redraws the charts at the width it has (Streamlit replaces a chart whose spec changed)
            tab.set_viewport_size({"width": 1920, "height": 1080})
            tab.wait_for_timeout(1500)
            tab.locator(ready).first.wait_for(timeout=60_000)
        browser.close()
    text = log.read_text()
    assert not re.search(r"inotify|watchdog|Traceback| 404 ", text, re.IGNORECASE), text[-3000:]
    assert failed == [], failed
    assert [path for path in answered if DEEP_LINK_PROBE.match(path)] == [], answered
    assert answered.get("/_stcore/health") == 200 and answered.get("/_stcore/host-config") == 200, answered
    assert not errors, errors
    assert console == [], console
