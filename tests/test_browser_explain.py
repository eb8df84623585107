"""Explain's present mode as a presenter uses it: in headless Chromium at a laptop (1440x900) and two
projector (1920x1080, 1280x720) sizes, opened from a link, walked through the whole default story with the keys a
clicker sends, every step's title, chart and two sentences on screen without scrolling and the chart clear of the
sentences beside it, and the place
kept by a reload. Screenshots: test-artifacts/explain-<w>x<h>-step-<k>.png.

Both window sizes use one server (a real `streamlit run serve.py` with a fresh history, into which the
shipped demo runs are imported on first start): present mode only reads them.
"""
from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.test_browser import CHART, CHROMIUM, CHROMIUM_ARGS, app_server, chart_texts, settle, shoot

playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.browser
SIZES = [(1440, 900), (1920, 1080), (1280, 720)]
NEXT_KEYS = ("ArrowRight", "PageDown", "Space")  # a laptop's arrow, a clicker's PageDown, the space bar
COUNTER = re.compile(r"^step (\d+) of (\d+)$")
SENTENCES = '.st-key-explain_sentences [data-testid="stMarkdownContainer"] p'
TOLERANCE = 2  # px of rounding


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server for the module: a second start and demo import per window size bought nothing (13-20 s)."""
    with app_server(tmp_path_factory.mktemp("explain-server")) as url:
        yield url


@pytest.fixture(params=SIZES, ids=lambda size: f"{size[0]}x{size[1]}")
def presenter(server: str, request: pytest.FixtureRequest) -> Iterator:
    """A browser window of the size under test on the home page (which imports the demo runs)."""
    width, height = request.param
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        tab = browser.new_page(viewport={"width": width, "height": height})
        errors: list[str] = []
        tab.on("pageerror", lambda error: errors.append(str(error)))
        tab.goto(server)
        tab.get_by_role("heading", name="BatchScope").wait_for(timeout=60_000)
        yield tab, server
        browser.close()
        assert not errors, errors


def where(tab) -> tuple[int, int]:
    """(step, of) from the one-line counter."""
    found = COUNTER.match(tab.get_by_text(COUNTER).inner_text().strip())
    assert found, tab.get_by_text(COUNTER).inner_text()
    return int(found[1]), int(found[2])


def wait_for_step(tab, k: int) -> None:
    """Step k on screen, its chart drawn; if it never comes, the failure says where the page is instead and what
    held the focus, and keeps a screenshot (a key once seemed lost under two busy workers, step 1 never left)."""
    try:
        tab.get_by_text(re.compile(rf"^step {k} of \d+$")).wait_for(timeout=60_000)
    except playwright.TimeoutError as stuck:
        width = tab.viewport_size["width"]
        shoot(tab, f"explain-{width}-stuck-before-step-{k}.png")
        focus = tab.evaluate("(e => e && `${e.tagName} ${e.getAttribute('role') || ''} ${e.textContent.slice(0, 40)}`)"
                             "(document.activeElement)")
        raise AssertionError(f"step {k} never came; the page shows {tab.get_by_text(COUNTER).all_inner_texts()} "
                             f"at {tab.url}, focus on {focus!r}") from stuck
    tab.locator(CHART).first.locator("svg").first.wait_for(timeout=60_000)
    settle(tab)


def off_screen(tab) -> list[str]:
    """Each of the step's parts not fully inside the window, and the page's overflow if it scrolls."""
    parts = {"title": tab.get_by_role("heading", name=re.compile(r"^\d+\. ")).first,
             "chart": tab.locator(CHART).first.locator("svg").first}
    # Vega may swap the svg for a new one as the page settles (seen once under two workers: "chart None"):
    # where it is is read once it is there again
    parts["chart"].wait_for(timeout=30_000)
    parts |= {f"sentence {i + 1}": tab.locator(SENTENCES).nth(i) for i in range(2)}
    width, height, scroll = tab.evaluate(
        "[window.innerWidth, window.innerHeight, document.scrollingElement.scrollHeight]")
    outside = [f"{name} {box}" for name, box in ((name, part.bounding_box()) for name, part in parts.items())
               if box is None or box["x"] < 0 or box["y"] < 0 or box["x"] + box["width"] > width + TOLERANCE
               or box["y"] + box["height"] > height + TOLERANCE]
    return outside + ([f"page scrolls: {scroll} > {height}"] if scroll > height + TOLERANCE else [])


def overlap(tab) -> float:
    """px by which the chart reaches past the left edge of the sentences beside it (0: clear of them)."""
    chart = tab.locator(CHART).first.locator("svg").first.bounding_box()
    words = tab.locator(SENTENCES).first.bounding_box()
    return max(0.0, chart["x"] + chart["width"] - words["x"] - TOLERANCE)


def test_present_mode_fits_the_screen_walks_with_keys_and_keeps_its_place(presenter) -> None:
    tab, url = presenter
    width, height = tab.viewport_size["width"], tab.viewport_size["height"]
    tab.goto(f"{url}/explain?present=1")
    wait_for_step(tab, 1)
    k, total = where(tab)
    assert (k, total) >= (1, 6)
    assert "present=1" in tab.url and "step=1" in tab.url and "run=" in tab.url
    opened = tab.url
    tab.get_by_text("Run and SLO").click()  # keys typed into a field stay there
    field = tab.get_by_role("combobox", name=re.compile("Run to explain"))
    field.click()
    for key in ("h", "Space", "ArrowRight", "ArrowLeft"):  # a search typed into the run picker
        field.press(key)
    tab.keyboard.press("Escape")
    settle(tab)
    assert where(tab) == (1, total) and tab.url == opened, tab.url
    tab.get_by_text("Run and SLO").click()  # closed again, and the focus off the field
    settle(tab)
    for k in range(1, total + 1):
        wait_for_step(tab, k)
        assert tab.locator(CHART).count() == 1
        assert tab.locator(SENTENCES).count() == 2
        assert not any("no data recorded" in t for t in chart_texts(tab)), chart_texts(tab)
        shoot(tab, f"explain-{width}x{height}-step-{k}.png")
        assert not off_screen(tab), (k, off_screen(tab))
        assert not overlap(tab), (k, overlap(tab))  # side-by-side panels' axis titles once ran under the text
        assert f"step={k}" in tab.url
        if k < total:
            tab.keyboard.press(NEXT_KEYS[(k - 1) % len(NEXT_KEYS)])
    tab.keyboard.press("PageDown")  # past the end: nothing moves
    settle(tab)
    assert where(tab) == (total, total)
    tab.keyboard.press("ArrowLeft")
    wait_for_step(tab, total - 1)
    tab.reload()
    wait_for_step(tab, total - 1)
    assert where(tab) == (total - 1, total) and tab.get_by_role("heading", name=re.compile(rf"^{total - 1}\. ")).count()
    tab.keyboard.press("PageUp")
    wait_for_step(tab, total - 2)
