"""The Explain page in a real browser: the demo runs, present mode walked with Next, a screenshot per step.

Uses test_browser.py's server (a real `streamlit run app.py` with a fresh history, into which the
shipped demo runs are imported on first start). Screenshots: test-artifacts/explain-step-<k>.png.
"""
from __future__ import annotations

import re

import pytest

from tests.test_browser import CHART, chart_texts, page, server, settle, shoot  # noqa: F401 (fixtures)

pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.browser


def test_present_mode_walks_every_step_of_a_demo_run(page) -> None:  # noqa: F811
    tab = page
    tab.get_by_role("link", name="Explain").first.click()
    tab.get_by_role("heading", name="Explain").wait_for(timeout=60_000)
    tab.locator(CHART).first.locator("svg").wait_for(timeout=60_000)
    settle(tab)
    assert tab.locator(CHART).count() >= 6
    tab.get_by_text("Present: one step at a time, large").click()
    settle(tab)
    counter = tab.get_by_text(re.compile(r"^step \d+ of \d+$"))
    counter.wait_for(timeout=30_000)
    total = int(counter.inner_text().split(" of ")[1])
    assert total >= 6
    for k in range(1, total + 1):
        tab.get_by_text(f"step {k} of {total}", exact=True).wait_for(timeout=30_000)
        tab.locator(CHART).first.locator("svg").wait_for(timeout=30_000)
        settle(tab)
        assert tab.locator(CHART).count() == 1
        assert tab.get_by_role("heading", name=re.compile(rf"^{k}\. ")).count() == 1
        assert tab.locator("h3").count() >= 2  # the two sentences, large
        assert not any("no data recorded" in t for t in chart_texts(tab)), chart_texts(tab)
        shoot(tab, f"explain-step-{k}.png")
        if k < total:
            tab.get_by_role("button", name="Next").click()
    assert tab.get_by_role("button", name="Next").is_disabled()
    tab.get_by_role("button", name="Previous").click()
    tab.get_by_text(f"step {total - 1} of {total}", exact=True).wait_for(timeout=30_000)
