"""The run report to send (batchscope.export) built from the shipped 8B chat run: what the HTML file holds,
that it loads nothing from a network, that a user's run name cannot break out of it, and the PNG of a chart.
Drawing it in Chromium offline is tests/test_browser_export.py."""
from __future__ import annotations

import json
import re
import struct

import altair as alt
import pytest

from batchscope import charts, export
from batchscope.explain.step import Step
from batchscope.ingest import ingest_run
from batchscope.report import Report
from batchscope.store import Store
from batchscope.ui.run_view import RunData, load_run
from tests.runner_helpers import REPO

RUN = "h200-fast-8b-bf16-chat"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    """The shipped 8B chat run, imported into a fresh history and analysed as the Run page does."""
    with Store(tmp_path_factory.mktemp("export") / "history.duckdb") as store:
        ingest_run(store, REPO / "data" / "demo" / RUN, demo=True, owner="demo")
        return load_run(store, RUN, None)


def run_spec(data: RunData) -> dict:
    return charts.linked_charts(data.table, data.analysis, memory_split=data.split, run=data.run["name"],
                                per_gpu=data.per_gpu)


def test_the_report_holds_the_run_reports_every_sentence_and_a_place_for_each_chart(data: RunData) -> None:
    figures = [export.Figure(export.RUN_CHARTS, run_spec(data)), export.Figure("Second", {"mark": "point"}, ("**A**",))]
    page = export.report_html(Report(data.run, data.analysis), figures)
    for marker in data.analysis.markers().values():
        if marker is not None:
            assert marker.sentence.split("**")[0][:60] in page.replace("&quot;", '"').replace("&#39;", "'")
    assert page.count('<div id="chart-') == 2 and "<strong>A</strong>" in page
    body = page.rsplit("</head>", 1)[1]
    assert body.count("<table>") == 1 and body.count("<tr>") == 1 + len(data.table)  # the header, then every point
    specs = json.loads(re.search(r"const specs = (.*);\n", page)[1])
    assert specs == [figure.spec for figure in figures]


def test_the_report_loads_nothing_from_elsewhere(data: RunData) -> None:
    page = export.report_html(Report(data.run, data.analysis), [export.Figure(export.RUN_CHARTS, run_spec(data))])
    markup = re.sub(r"<script>.*?</script>", "<script></script>", page, flags=re.S)  # the runtime: the browser test
    assert not re.search(r"<(script|img|iframe)[^>]*\bsrc=|<link\b|@import|url\(", markup)
    assert "vegaEmbed" in page and len(page) > 500_000  # the runtime is in the file


def test_a_run_name_written_as_markup_stays_text(data: RunData) -> None:
    name = "</script><script>alert(1)</script>"
    run = {**data.run, "name": name}
    spec = charts.linked_charts(data.table, data.analysis, memory_split=data.split, run=name, per_gpu=data.per_gpu)
    page = export.report_html(Report(run, data.analysis), [export.Figure(export.RUN_CHARTS, spec)])
    assert "alert(1)" in page and "<script>alert(1)" not in page
    assert page.count("</script>") == 2  # the runtime's and the drawing script's own


def test_a_chart_png_is_the_chart_drawn_at_twice_its_size(data: RunData) -> None:
    png = export.chart_png(run_spec(data))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 2 * 1000 and height > 2 * 600  # two 540 px panels side by side, three rows


def test_explain_steps_become_numbered_figures_with_their_sentences() -> None:
    chart = alt.Chart({"values": [{"x": 1}]}).mark_point().encode(x="x:Q")
    figures = export.step_figures([Step("a", "First", chart, ("one", "two")), Step("b", "Second", chart, ("3", "4"))])
    assert [(f.title, f.sentences) for f in figures] == [("1. First", ("one", "two")), ("2. Second", ("3", "4"))]
    assert figures[0].spec["mark"]["type"] == "point"
