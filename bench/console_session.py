"""A scripted browser session over every page, as issue 34's bar reads: what the console and the server log say.

    python bench/console_session.py [--minutes 2]

Starts `streamlit run serve.py` with the shipped config on a fresh history (the demo runs imported on first start)
and, until `--minutes` have passed, opens every page by its own link in a fresh tab of one headless Chromium
(Home, New sweep, Run bare and by link for a static and a continuous demo run, History and an overlay link,
Explain, Explain present walked by keys), resizing each tab from 1440x900 to 1920x1080 once it is drawn. Prints
every console warning and error with the page it came from and how often (a deep link no longer probes for the
server under its own path: `batchscope/page_base.py`), then the server log's file-watcher (inotify) and traceback
lines.

Not a test: what a timed browser sees depends on the machine's load (docs/benchmarks.md); the test that a clean
server fails no request of ours and logs nothing is tests/test_browser_server.py.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.test_browser import CHART, CHROMIUM, CHROMIUM_ARGS, serve_app  # noqa: E402

STATIC_RUN, CONTINUOUS_RUN = "h200-fast-8b-bf16-chat", "h200-cont-8b-bf16-chat-rate"
PAGES = ["", "new_sweep", "run", f"run?run={STATIC_RUN}", f"run?run={CONTINUOUS_RUN}", "history",
         f"history?runs={STATIC_RUN},h200-fast-8b-fp8-chat", "explain", f"explain?run={STATIC_RUN}&present=1"]
PRESENT_KEYS = ("ArrowRight", "ArrowRight", "PageDown", "ArrowLeft")
SETTLE_S = 2.0  # after the page's first chart (or heading) is drawn: later reruns and redraws log too
LOG_LINES = re.compile(r"inotify|watchdog|Traceback", re.IGNORECASE)


def visit(browser, url: str, page: str, heard: Counter) -> None:
    """One page in a fresh tab: drawn, resized, settled (present mode walked by keys); its console noted."""
    tab = browser.new_page(viewport={"width": 1440, "height": 900})
    tab.on("console", lambda m: heard.update([(page, m.type, m.text[:200], m.location.get("url", ""))])
           if m.type in ("warning", "error") else None)
    tab.on("pageerror", lambda error: heard.update([(page, "pageerror", str(error)[:200], "")]))
    try:
        tab.goto(f"{url}/{page}")
        tab.locator(f"{CHART}, h1").first.wait_for(timeout=60_000)
        tab.wait_for_timeout(SETTLE_S * 1000)
        tab.set_viewport_size({"width": 1920, "height": 1080})
        if "present=1" in page:
            for key in PRESENT_KEYS:
                tab.keyboard.press(key)
                tab.wait_for_timeout(700)
        tab.wait_for_timeout(SETTLE_S * 1000)
    finally:
        tab.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=2.0)
    args = parser.parse_args()
    heard: Counter = Counter()
    with tempfile.TemporaryDirectory() as home:
        url, process, log = serve_app(Path(home), {"BATCHSCOPE_DB": f"{home}/history.duckdb",
                                                   "BATCHSCOPE_RUNS": f"{home}/runs"})
        loads = 0
        try:
            with sync_playwright() as driver:
                browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                start = time.monotonic()
                while time.monotonic() - start < args.minutes * 60:
                    for page in PAGES:
                        visit(browser, url, page, heard)
                        loads += 1
                browser.close()
            minutes = (time.monotonic() - start) / 60
        finally:
            process.terminate()
            process.wait(timeout=30)
            log.close()
        log_hits = [line for line in (Path(home) / "streamlit.log").read_text().splitlines() if LOG_LINES.search(line)]
    print(f"{loads} page loads in {minutes:.1f} min; console warnings and errors (count, page, kind, text):")
    for (page, kind, text, where), count in sorted(heard.items()):
        print(f"  {count:3} /{page}  {kind}: {text}  ({where.removeprefix(url)})")
    print(f"in all: {sum(heard.values())}; server log lines on inotify, watchdog or a traceback: {len(log_hits)}")
    for line in log_hits[:20]:
        print("  " + line)


if __name__ == "__main__":
    main()
