"""Explain's place in the URL and present mode's sizes: the pure rules (explain_present) on hand-made
input, then the page through AppTest with the shipped demo runs — a link opens its run, step and
present mode, a bad part of a link is said and replaced, and the SLO offers round limits."""
from __future__ import annotations

import math

import altair as alt
import pandas as pd
import pytest

from batchscope.ui import explain_present
from batchscope.ui.explain_present import Place
from tests.test_explain import counter, demo, open_explain, step_sentences  # noqa: F401 (demo: a fixture)
from tests.test_pages import app, home, no_traceback, texts  # noqa: F401 (fixtures)

RUNS = ["a", "b", "c"]
ROUND_MANTISSAS = {1.0, 2.0, 2.5, 5.0}


def first_run() -> str:
    """The default run, as the page's `default_id` would choose it."""
    return "a"


# ---- the rules ----

def test_a_link_sets_each_part_it_has_and_keeps_the_rest() -> None:
    now = Place("b", 4, False)
    assert explain_present.from_url({}, now, RUNS, first_run) == (now, [])  # opened from the menu: stay
    assert explain_present.from_url({"run": "c", "step": "3", "present": "1"}, now, RUNS, first_run) == (Place("c", 2, True), [])
    assert explain_present.from_url({"run": "c"}, now, RUNS, first_run) == (Place("c", 0, False), [])  # a new run starts at 1
    assert explain_present.from_url({"run": "b"}, now, RUNS, first_run) == (now, [])
    assert explain_present.from_url({"present": "0"}, Place("b", 4, True), RUNS, first_run) == (now, [])
    assert explain_present.from_url({}, Place(None), RUNS, first_run) == (Place("a"), [])  # first visit: the default


def test_a_link_to_a_stored_run_never_chooses_the_default_run() -> None:
    def refuse() -> str:  # choosing it analyses every demo run: a linked page must not wait for that
        raise AssertionError("the default run was chosen for a link that names a stored run")

    assert explain_present.from_url({"run": "c", "step": "2", "present": "1"}, Place(None), RUNS, refuse) == (
        Place("c", 1, True), [])


def test_a_bad_run_or_step_in_a_link_falls_back_and_says_so() -> None:
    place, [note] = explain_present.from_url({"run": "gone", "step": "2"}, Place(None), RUNS, first_run)
    assert place == Place("a", 1, False) and "`gone`" in note and "default run" in note
    for bad in ("x", "0", "-1", "2.5", ""):
        place, [note] = explain_present.from_url({"step": bad}, Place("b", 3), RUNS, first_run)
        assert place == Place("b", 0) and f"`step={bad}`" in note
    assert explain_present.clamp_step(2, 7) == (2, None)
    assert explain_present.clamp_step(6, 7) == (6, None)
    assert explain_present.clamp_step(11, 7) == (6, "This story has 7 steps, so step 7 opens instead of step 12.")


def test_the_url_holds_the_run_and_while_presenting_the_step_from_one() -> None:
    assert Place("a", 2, True).params() == {"run": "a", "step": "3", "present": "1"}
    assert Place("a", 2, False).params() == {"run": "a"}
    assert Place(None).params() == {}
    params = {"run": "a", "step": "9", "present": "1", "slo": "ttft:95:500"}
    assert explain_present.write_url(params, Place("b", 0, False)) == {"run": "b"}
    assert params == {"run": "b", "slo": "ttft:95:500"}  # other pages' parameters are left alone


def test_present_charts_fit_the_window_beside_the_sentences() -> None:
    # 1440x900: 62 % of the width less the padding; the height below the controls and a two-line title
    assert explain_present.chart_size((1440, 900)) == (752, 685)
    assert explain_present.chart_size((1920, 1080)) == (1050, 865)
    assert explain_present.chart_size(None) == explain_present.chart_size(explain_present.DEFAULT_VIEWPORT)
    # the window whose size present_keys keeps quiet is the one drawn without a size: no rerun for nothing
    lo_w, hi_w, lo_h, hi_h = explain_present.DRAWN_AS_DEFAULT
    assert (lo_w, lo_h) == (hi_w, hi_h) == explain_present.DEFAULT_VIEWPORT
    assert explain_present.chart_size((600, 400)) == explain_present.MIN_CHART
    frame = pd.DataFrame({"x": [1, 2], "y": [3, 4]})
    one = alt.Chart(frame).mark_line().encode(x="x:Q", y="y:Q")
    single = explain_present.present_chart(one, (1440, 900)).to_dict()
    assert (single["width"], single["height"]) == (752, 685)
    pair = explain_present.present_chart(alt.hconcat(one, one), (1920, 1080)).to_dict()
    # panels are sized by their plots: the pair's titles, axes and legend take the room set aside
    assert [(p["width"], p["height"]) for p in pair["hconcat"]] == [(440, 675)] * 2
    assert pair["config"]["axis"]["labelFontSize"] == 16  # 18 px titles at 1080 px high


# ---- the page ----

def open_link(**query: str):
    """The Explain page opened from a link with this query, as a browser does (the first run reads it)."""
    at = app()
    at.switch_page("app_pages/explain.py")
    at.query_params.update(query)
    return at.run()


def test_a_link_opens_its_run_at_its_step_in_present_mode(demo) -> None:
    at = open_link(run="h200-fast-8b-bf16-chat", step="3", present="1")
    no_traceback(at)
    assert not at.warning, texts(at, "warning")
    assert at.selectbox(key="explain_run").value == "h200-fast-8b-bf16-chat"
    assert counter(at).startswith("step 3 of ") and step_sentences(at)[0].startswith("## 3. ")
    assert dict(at.query_params) == {"run": "h200-fast-8b-bf16-chat", "step": "3", "present": "1"}
    at.run()  # a rerun (the browser reporting its size) keeps the place
    assert counter(at).startswith("step 3 of ")
    at.selectbox(key="explain_run").set_value("h200-fast-1b-bf16-long").run()
    assert counter(at).startswith("step 1 of ") and at.query_params["run"] == "h200-fast-1b-bf16-long"
    assert at.query_params["step"] == "1"
    at.query_params["run"] = "gone"  # a link opened later in the same session (the browser's back button)
    at.run()
    assert ["No run `gone`" in note for note in texts(at, "warning")] == [True]
    assert at.query_params["run"] == "h200-fast-8b-bf16-chat"


def test_an_unknown_run_in_a_link_opens_the_default_with_a_note(demo) -> None:
    at = open_link(run="no-such-run", step="2", present="1")
    no_traceback(at)
    assert not at.error
    [note] = texts(at, "warning")
    assert "No run `no-such-run`" in note
    assert at.selectbox(key="explain_run").value == "h200-fast-8b-bf16-chat"  # the default story
    assert counter(at).startswith("step 2 of ") and at.query_params["run"] == "h200-fast-8b-bf16-chat"
    at.run()
    assert texts(at, "warning") == [note]  # still said after a rerun that does not move
    at.button(key="explain_next").click().run()
    assert not at.warning  # moved on: the note about the link is done


@pytest.mark.parametrize(("step", "opens", "said"), [("abc", 1, "`step=abc` is not a step number"),
                                                     ("0", 1, "`step=0` is not a step number"),
                                                     ("99", None, "so step {total} opens instead of step 99")])
def test_a_bad_step_in_a_link_opens_a_real_step_with_a_note(demo, step: str, opens: int | None, said: str) -> None:
    at = open_link(step=step, present="1")
    no_traceback(at)
    total = int(counter(at).split(" of ")[1])
    opens = opens or total
    assert counter(at) == f"step {opens} of {total}" and at.query_params["step"] == str(opens)
    assert any(said.format(total=total) in note for note in texts(at, "warning")), texts(at, "warning")


def test_the_slo_offers_round_limits_across_the_runs_latency(demo) -> None:
    at = open_link()
    no_traceback(at)
    slider = at.select_slider[0]
    values = [float(option.removesuffix(" ms")) for option in slider.options]
    assert all(round(v / 10 ** math.floor(math.log10(v)), 6) in ROUND_MANTISSAS for v in values), values
    assert {500.0, 1000.0} <= set(values) and values == sorted(values)
    assert slider.value in values[1:-1]  # starts mid-range, on a round value
    at.selectbox(key="explain_slo_metric").set_value("itl").run()
    itl = [float(option.removesuffix(" ms")) for option in at.select_slider[0].options]
    assert itl != values and len(itl) >= 5


def test_long_sentences_get_smaller_type_down_to_a_floor() -> None:
    assert "max(1.55rem, 1.45vw)" in explain_present.sentence_css(["a" * 300, "b" * 220])  # 520: full size
    assert "max(1.10rem, 1.03vw)" in explain_present.sentence_css(["a" * 1040])  # twice as long: 1/√2 ≈ 0.707
    assert "max(1.08rem, 1.01vw)" in explain_present.sentence_css(["a" * 5000])  # never under 70 %
