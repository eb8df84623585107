"""The one SLO control: its URL form, and the widgets through AppTest (a link sets them, a change
rewrites the link, switching off takes the SLO out, a bad limit is refused beside the field)."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from batchscope.analysis import SLO
from batchscope.ui import slo_control


def control_page() -> None:
    """A page holding only the control, kept in the URL, printing what it returns."""
    import streamlit as st

    from batchscope.ui.slo_control import latency_choice, refused, slo_control

    slo = slo_control("test_slo", url=True)
    st.write(f"slo={slo!r}")
    st.write(f"latency={latency_choice('test_slo')} refused={refused('test_slo')}")


def control_with_span() -> None:
    import streamlit as st

    from batchscope.ui.slo_control import slo_control

    ranges = {("ttft", 95): ([10.0, 20.0, 25.0, 50.0, 100.0, 200.0, 250.0, 500.0, 1000.0], 100.0)}
    st.write(f"slo={slo_control('span_slo', switch=None, span=lambda m, p: ranges.get((m, p)))!r}")


def shown(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown]


def test_slo_param_round_trips_and_bad_links_give_none() -> None:
    slo = SLO("itl", 99, 25.0)
    assert slo_control.slo_param(slo) == "itl:99:25"
    assert slo_control.parse_slo_param(slo_control.slo_param(slo)) == slo
    for bad in (None, "", "itl:99", "tps:95:5", "itl:90:5", "itl:95:-1", "itl:95:x"):
        assert slo_control.parse_slo_param(bad) is None


def test_a_link_sets_the_widgets_and_a_change_rewrites_the_link() -> None:
    at = AppTest.from_function(control_page)
    at.query_params["slo"] = "itl:99:25"
    at.run()
    assert not at.exception
    assert shown(at)[0] == f"slo={SLO('itl', 99, 25.0)!r}"
    assert at.toggle(key="test_slo_on").value and at.selectbox(key="test_slo_metric").value == "itl"
    at.number_input(key="test_slo_ms").set_value(40.0).run()
    assert at.query_params["slo"] == "itl:99:40"
    at.selectbox(key="test_slo_percentile").set_value(50).run()
    assert at.query_params["slo"] == "itl:50:40" and shown(at)[1].startswith("latency=('itl', 50)")
    at.toggle(key="test_slo_on").set_value(False).run()
    assert "slo" not in at.query_params and shown(at)[0] == "slo=None"
    assert shown(at)[1].startswith("latency=('itl', 50)")  # the latency shown stays where it was


def test_a_page_without_an_slo_in_its_link_starts_off_and_a_bad_link_is_ignored() -> None:
    at = AppTest.from_function(control_page).run()
    assert shown(at)[0] == "slo=None" and "slo" not in at.query_params
    at = AppTest.from_function(control_page)
    at.query_params["slo"] = "tps:95:5"
    at.run()
    assert not at.exception and not at.error and shown(at)[0] == "slo=None"


def test_a_limit_of_zero_is_refused_beside_the_field() -> None:
    at = AppTest.from_function(control_page)
    at.query_params["slo"] = "ttft:95:500"
    at.run()
    at.number_input(key="test_slo_ms").set_value(0.0).run()
    assert shown(at)[0] == "slo=None" and shown(at)[1].endswith("refused=True")
    assert any("positive" in e.value for e in at.error)
    assert "slo" not in at.query_params


def test_a_span_gives_a_slider_over_round_limits_or_says_there_is_none() -> None:
    at = AppTest.from_function(control_with_span).run()
    [slider] = at.select_slider
    assert slider.options == ["10 ms", "20 ms", "25 ms", "50 ms", "100 ms", "200 ms", "250 ms", "500 ms", "1000 ms"]
    assert slider.value == 100.0 and shown(at)[0] == f"slo={SLO('ttft', 95, 100.0)!r}"
    slider.set_value(500.0).run()
    assert shown(at)[0] == f"slo={SLO('ttft', 95, 500.0)!r}"
    at.selectbox(key="span_slo_metric").set_value("itl").run()
    assert not at.select_slider and "recorded no ITL P95" in at.info[0].value and shown(at)[0] == "slo=None"


def test_limits_are_labelled_without_trailing_zeros() -> None:
    assert [slo_control.ms_label(ms) for ms in (0.25, 2.5, 500.0, 2500.0)] == ["0.25 ms", "2.5 ms", "500 ms", "2500 ms"]
