"""The README's screenshots, taken from the shipped demo set so they change when the set does.

    python bench/readme_shots.py [--out docs/img]

Starts `streamlit run app.py` on a fresh history holding only the shipped demo runs (as bench/page_speed.py
does), opens each page below in headless Chromium at 1440 px wide, waits until its charts are drawn, and saves
the linked charts (Run, History) or the whole window (Explain's present mode) as PNG. A run named below that is
not in data/demo stops it with its name: the README would otherwise show an older picture than it says.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TALL = 2600  # the Run page's linked charts fit whole, so the element shot is not cut by the page's own scroll
SHOTS = {  # file name -> (path and query, runs it shows, what to shoot: "charts" or "window")
    "run-8b-chat.png": ("run?run=h200-fast-8b-bf16-chat", ["h200-fast-8b-bf16-chat"], "charts"),
    "run-8b-clients.png": ("run?run=h200-cont-8b-bf16-chat-clients", ["h200-cont-8b-bf16-chat-clients"], "charts"),
    "explain-present.png": ("explain?run=h200-fast-8b-bf16-chat&step=1&present=1", ["h200-fast-8b-bf16-chat"],
                            "window"),
    "history-1b-vs-8b.png": ("history?runs=h200-fast-1b-bf16-chat,h200-fast-8b-bf16-chat",
                             ["h200-fast-1b-bf16-chat", "h200-fast-8b-bf16-chat"], "charts"),  # History's offer
}
HIDE_HEADER = '[data-testid="stHeader"] { display: none !important; }'


def missing_runs(demo: Path) -> list[str]:
    """Runs the shots name that the demo folder does not hold."""
    return sorted({run for _, runs, _ in SHOTS.values() for run in runs if not (demo / run).is_dir()})


def shoot(tab, url: str, what: str, target: Path, window: dict[str, int], ready: str) -> None:
    """Open url, wait until `ready` says every chart is drawn, save the first chart block or the window (a
    projector-like one for "window", a tall one for "charts")."""
    tab.set_viewport_size(window if what == "window" else {**window, "height": TALL})
    tab.goto(url)
    tab.wait_for_timeout(300)
    tab.wait_for_function(ready, arg="chart", timeout=120_000, polling=100)
    tab.add_style_tag(content=HIDE_HEADER)
    tab.wait_for_timeout(800)  # Vega's last transition
    if what == "window":
        tab.screenshot(path=str(target))
    else:
        tab.locator('[data-testid="stVegaLiteChart"]').first.screenshot(path=str(target))


def main() -> None:
    from playwright.sync_api import sync_playwright  # here, so the shot list reads without a browser driver

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import page_speed  # a sibling script, not a package

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    args = parser.parse_args()
    missing = missing_runs(REPO / "data" / "demo")
    if missing:
        raise SystemExit(f"not in data/demo: {', '.join(missing)}")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as home, contextlib.ExitStack() as stack:
        url, process = page_speed.serve(REPO, Path(home))
        stack.callback(page_speed.stop, process)
        with sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=page_speed.CHROMIUM, args=page_speed.CHROMIUM_ARGS)
            tab = browser.new_page(viewport=page_speed.VIEWPORT)
            page_speed.time_page(browser, url, "chart")  # first start: imports the demo runs
            for name, (path, _, what) in SHOTS.items():
                shoot(tab, f"{url}/{path}", what, args.out / name, page_speed.VIEWPORT, page_speed.READY)
                print(f"{args.out / name}: {(args.out / name).stat().st_size // 1024} KiB")
            browser.close()


if __name__ == "__main__":
    main()
