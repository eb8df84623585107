"""Page speed as a user feels it: navigation to the last chart drawn, in headless Chromium, warm server.

    python bench/page_speed.py [--app-dir DIR [--app-dir OTHER]] [--pages run,history,explain] [--repeats 5]
                               [--json PATH]

Starts `streamlit run serve.py` in --app-dir (default: this checkout) on a fresh history holding only the
shipped demo runs (imported on first start), opens each page once to warm the server (its caches, the
analyses), then times `--repeats` fresh tabs per page: from navigation start (performance.timeOrigin)
to the moment the page is ready, meaning every Vega chart holds drawn marks (or, for History, the table
is drawn), no spinner shows and Streamlit's "running" status is gone. Prints the median and range per page
(issue 34's bar: ≤ 2.0 s each on a 2-core machine with the server and the browser on it), and the load
average while the samples ran (on a shared machine, compare only rows taken at a similar load).

Two browser states, each its own table: `cold`, every tab in a new browser profile, so it downloads and
compiles Streamlit's 5.5 MB of JavaScript first (a first visit ever); `warm`, every tab in one profile
that has opened each page before, so those files come from its cache (Streamlit serves them immutable
for a year): a user opening a link in the browser they use the app in.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
VIEWPORT = {"width": 1440, "height": 900}
RUN = "h200-fast-8b-bf16-chat"
PAGES = {  # name -> (path and query, what must be drawn)
    "Run (8B chat)": (f"run?run={RUN}", "chart"),
    "History (table)": ("history", "table"),
    "Explain present link": (f"explain?run={RUN}&step=1&present=1", "chart"),
}
READY = """kind => {
  const busy = document.querySelector('[data-testid="stSpinner"], [data-testid="stSkeleton"]')
    || document.querySelector('[data-testid="stStatusWidgetRunningIcon"], [data-testid="stStatusWidgetRunningManIcon"]')
    || document.querySelector('[data-stale="true"]');
  if (busy) return false;
  if (kind === 'table') {
    return document.querySelector('[data-testid="stDataFrame"] canvas') ? performance.now() : false;
  }
  const charts = Array.from(document.querySelectorAll('[data-testid="stVegaLiteChart"]'));
  return charts.length > 0 && charts.every(c => c.querySelector('svg .role-mark, canvas')) ? performance.now() : false;
}"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def serve(app_dir: Path, home: Path) -> tuple[str, subprocess.Popen]:
    """The checkout's server (`streamlit run serve.py`; `app.py` in a checkout from before serve.py) in app_dir
    with its own history under home; returns once healthy."""
    port = free_port()
    entry = "serve.py" if (app_dir / "serve.py").exists() else "app.py"
    env = {**os.environ, "BATCHSCOPE_DB": str(home / "history.duckdb"), "BATCHSCOPE_RUNS": str(home / "runs")}
    process = subprocess.Popen([sys.executable, "-m", "streamlit", "run", entry, "--server.port", str(port),
                                "--server.headless", "true"], cwd=app_dir, env=env,
                               stdout=(home / "streamlit.log").open("w"), stderr=subprocess.STDOUT)
    url = f"http://localhost:{port}"
    for _ in range(200):
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                return url, process
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise SystemExit(f"streamlit did not start: {(home / 'streamlit.log').read_text()[-2000:]}")


def time_page(browser, url: str, kind: str) -> float:
    """Seconds from navigation start to ready, in a fresh tab (a new Streamlit session); `browser` is a
    Browser (each tab in a new profile) or a BrowserContext (every tab in that one)."""
    tab = browser.new_page(**({"viewport": VIEWPORT} if hasattr(browser, "new_context") else {}))
    try:
        tab.goto(url, wait_until="commit")
        tab.wait_for_timeout(50)  # let the first spinner appear before READY can see an empty page as done
        ready = tab.wait_for_function(READY, arg=kind, timeout=120_000, polling=20).json_value()
        return ready / 1000
    finally:
        tab.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--app-dir", type=Path, action="append",
                        help="a checkout to time (default: this one); give two to compare them sample by sample, so "
                             "a shared machine's load falls on both alike")
    parser.add_argument("--pages", type=lambda text: text.split(","), default=None,
                        help="the pages to time, by the first word of their name (default: every one)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    dirs = [str(path.resolve()) for path in args.app_dir or [REPO]]
    pages = {name: page for name, page in PAGES.items() if not args.pages or name.split()[0].lower() in args.pages}
    with tempfile.TemporaryDirectory() as home, contextlib.ExitStack() as stack:
        urls = []
        for index, app_dir in enumerate(dirs):
            (Path(home) / str(index)).mkdir()
            url, process = serve(Path(app_dir), Path(home) / str(index))
            stack.callback(stop, process)
            urls.append(url)
        with sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            profile = browser.new_context(viewport=VIEWPORT)
            for url in urls:
                time_page(browser, url, "chart")  # first start: imports the demo runs
                for path, kind in PAGES.values():
                    time_page(profile, f"{url}/{path}", kind)  # warm: analyses cached, modules imported, files cached
            results = {state: sample(where, dict(zip(dirs, urls)), pages, args.repeats)
                       for state, where in (("cold", browser), ("warm", profile))}
            browser.close()
    for state, (times, loads) in results.items():
        print(f"\n{state} browser, load average {min(loads):.1f}–{max(loads):.1f} (1 min, {os.cpu_count()} cores); "
              f"median s (min–max, n = {args.repeats})")
        print("| page | " + " | ".join(dirs) + " |\n|---|" + "---|" * len(dirs))
        for name in pages:
            print(f"| {name} | " + " | ".join(f"**{statistics.median(times[d][name]):.2f}** "
                                              f"({min(times[d][name]):.2f}–{max(times[d][name]):.2f})" for d in dirs) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(timeout=30)


def sample(browser, urls: dict[str, str], pages: dict[str, tuple[str, str]],
           repeats: int) -> tuple[dict[str, dict[str, list[float]]], list[float]]:
    """`repeats` timed tabs per page and checkout (app dir -> url), the checkouts taking turns; and the
    1-minute load average before each."""
    times: dict[str, dict[str, list[float]]] = {app_dir: {} for app_dir in urls}
    loads: list[float] = []
    for name, (path, kind) in pages.items():
        for _ in range(repeats):
            for app_dir, url in urls.items():
                loads.append(os.getloadavg()[0])
                times[app_dir].setdefault(name, []).append(time_page(browser, f"{url}/{path}", kind))
    return times, loads


if __name__ == "__main__":
    main()
