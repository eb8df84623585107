"""The download buttons of a run's report (one offline HTML file) and of each chart as a PNG.

The files are made only when a button is pressed (Streamlit calls the function then, on its own thread), so
drawing a page costs nothing; pressing one does not rerun the page.
"""
from __future__ import annotations

from collections.abc import Callable

import altair as alt
import streamlit as st

from batchscope import export
from batchscope.explain.step import Step
from batchscope.report import Report
from batchscope.ui.run_view import RunData

REPORT_HELP = "One HTML file with every chart and the analysis; it opens in any browser with no network."


def report_button(make: Callable[[], str], run_id: str, key: str) -> None:
    st.download_button("Download report", make, file_name=f"{run_id}-report.html", mime="text/html",
                       icon=":material/description:", on_click="ignore", key=key, help=REPORT_HELP)


def png_button(chart: dict | alt.TopLevelMixin, file_name: str, key: str, label: str = "PNG") -> None:
    """A PNG of `chart` (a Vega-Lite dict or an Altair chart), drawn when pressed."""
    st.download_button(label, lambda: export.chart_png(chart if isinstance(chart, dict) else chart.to_dict()),
                       file_name=f"{file_name}.png", mime="image/png", icon=":material/image:",
                       on_click="ignore", key=key)


def run_downloads(data: RunData, spec: dict, price: float | None) -> None:
    """The Run page's report (its linked charts, markers and points, costed at `price`) and its charts' PNG."""
    run_id = data.run["run_id"]
    report_col, png_col = st.columns(2)
    with report_col:
        report_button(lambda: export.report_html(Report(data.run, data.analysis, price),
                                                 [export.Figure(export.RUN_CHARTS, spec)]), run_id, "run_report")
    with png_col:
        png_button(spec, f"{run_id}-charts", "run_png", label="Download charts as PNG")


def explain_downloads(data: RunData, steps: list[Step], shown: int | None) -> None:
    """Explain's report (every step, then the run's markers and points) and, in present mode, the PNG of the
    step on screen (`shown`, its index)."""
    run_id = data.run["run_id"]
    report_button(lambda: export.report_html(Report(data.run, data.analysis), export.step_figures(steps),
                                             heading="The story, step by step"), run_id, "explain_report")
    if shown is not None:
        png_button(steps[shown].chart, f"{run_id}-step-{shown + 1}", "explain_png", label="PNG of this step")
