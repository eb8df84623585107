"""The History page's comparisons, drawn: the overlaid runs' charts and side-by-side tables, and the
regressions each listed run shows against its latest earlier like run. The logic is in `history_view`,
`overlay_compare` and `answers_view`; this module only lays it out."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from batchscope import charts
from batchscope.analysis import SLO
from batchscope.analysis.cost import device_type
from batchscope.analysis.marker import pct
from batchscope.analysis.regression import NOISE_FLOOR
from batchscope.charts.layout import panel_width
from batchscope.store import Store
from batchscope.ui import answers_view, history_view, overlay_compare, resources
from batchscope.ui.plain_text import plain
from batchscope.ui.present_keys import window_width
from batchscope.ui.run_view import RunData


def show_overlay(store: Store, picked: list[str], overlay: dict[str, RunData], slo: SLO | None, percentile: int,
                 metric: str) -> None:
    """The chosen runs overlaid on the linked charts, what each ran on, and their knees and memory side by side."""
    skipped = len(picked) - len(overlay)
    if skipped:
        st.caption(f"{skipped} chosen run(s) have no finished points and are not drawn.")
    different = history_view.device_problem(overlay)
    if different:  # said before the charts invite a comparison
        st.warning(plain(different), icon=":material/warning:")
    st.vega_lite_chart(spec=charts.overlay_charts(
        {label: data.table for label, data in overlay.items()},
        {label: data.analysis for label, data in overlay.items()},
        {label: data.split for label, data in overlay.items()},
        slo=slo, percentile=percentile, latency_metric=metric, width=panel_width(window_width("history_window"))),
        width="content")
    st.markdown("**What each ran on**: compare runs only with these in view.")
    st.dataframe(history_view.fingerprints(overlay), hide_index=True, width="stretch")
    st.markdown("**Side by side**: where each run's knee falls, and how its memory splits.")
    for line in overlay_compare.lacking_words(overlay) + list(filter(None, [overlay_compare.compared(overlay)[1]])):
        st.caption(plain(line))
    prices = {label: answers_view.stored_price(store, device_type(data.run)) for label, data in overlay.items()}
    side_by_side = history_view.comparison_display(history_view.comparison_table(overlay, prices, metric))
    st.dataframe(side_by_side, hide_index=True, width="stretch")
    st.altair_chart(charts.memory_split_by_run({label: data.split for label, data in overlay.items()}),
                    width="content")
    for label, data in overlay.items():
        st.page_link("app_pages/run.py", label=f"Open {label}", query_params={"run": data.run["run_id"]},
                     icon=":material/open_in_new:")


def offer_overlay(suggested: list[str], labels: dict[str, str], runs_key: str) -> None:
    """With nothing overlaid: how to compare, and on a history of demo runs alone the comparison to start from
    (history_view.default_overlay) one click away, which sets the runs widget (`runs_key`). Not drawn on arrival:
    the overlay's charts and tables would take the page from 1.7 to 2.4 s (docs/benchmarks.md, issue 34's 2 s)."""
    shown = [run_id for run_id in suggested if run_id in labels]  # a filter may hide one

    def pick() -> None:
        st.session_state[runs_key] = shown

    if len(shown) > 1:
        st.button(f"Overlay {' and '.join(labels[run_id] for run_id in shown)}", icon=":material/stacked_line_chart:",
                  key="overlay_default", on_click=pick)
    st.caption("Pick two or more runs to overlay them on the linked charts, under one SLO.")


def show_regressions(store: Store, all_runs: pd.DataFrame, runs: pd.DataFrame, slo: SLO | None) -> None:
    """Each listed run against the latest earlier run of the same configuration, under History's SLO."""
    names = dict(zip(all_runs["run_id"], all_runs["name"]))
    found = answers_view.regressions(store, runs["run_id"].tolist(), lambda run_id: resources.load_run(run_id, slo))
    flagged = [c for c in found if c.flagged]
    st.subheader("Regressions")
    st.caption(f"A run is compared with the latest earlier finished run of the same model, dtype, engine, workload, "
               f"GPU, driver and versions. It is flagged when its best throughput moved beyond noise (the best "
               f"points' repeat spreads do not overlap and the change is over {pct(NOISE_FLOOR)}) or its working "
               f"point moved, under the SLO chosen below. {len(found)} pair(s) compared, {len(flagged)} flagged.")
    for comparison in flagged:
        st.warning(plain(answers_view.regression_words(comparison, names)), icon=":material/trending_down:"
                   if comparison.slower else ":material/compare_arrows:")
