"""BatchScope's app, served by `streamlit run serve.py` (run.sh starts it). Registers the pages, draws Home."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from batchscope import charts
from batchscope.ui import resources, team_view
from batchscope.ui.plain_text import plain
from batchscope.ui.run_view import informative_run, run_title

LATEST_RUNS = 5
FAVICON = Path(__file__).parent / "assets" / "favicon.png"


def home() -> None:
    """Two lines on what the tool is for, the way into each page, and the latest runs."""
    st.title("BatchScope")
    st.markdown("Measure how LLM inference **batch size** trades throughput against latency and memory "
                "on a real GPU.  \nSweep a model over batch sizes, see where bigger batches stop helping, "
                "and pick the working point that meets your latency SLO.")
    left, middle, right = st.columns(3)
    left.page_link("app_pages/new_sweep.py", label="Start a new sweep", icon=":material/play_arrow:")
    middle.page_link("app_pages/history.py", label="Browse and compare runs", icon=":material/history:")
    st.page_link("app_pages/explain.py", label="Explain a run, step by step (for demos)", icon=":material/school:")
    try:
        runs = resources.store().runs()
    except Exception as error:  # the DB is unreadable: say so instead of a traceback
        resources.show_unexpected(error, "reading the run history")
        return
    latest = informative_run(runs)
    resources.analyse_ahead(latest)  # the run the next click most likely opens
    right.page_link("app_pages/run.py", label="Latest run with results", icon=":material/monitoring:",
                    query_params={"run": latest} if latest else None, disabled=latest is None)
    st.subheader("Latest runs")
    if runs.empty:
        st.info("No runs yet. Start a new sweep, or import a run folder on the History page.")
        return
    links, chart = st.columns([3, 2])
    for run in runs.head(LATEST_RUNS).to_dict("records"):
        links.page_link("app_pages/run.py", label=f"{run_title(run)} · {run['state']}",
                        query_params={"run": run["run_id"]})
    chart.vega_lite_chart(spec=charts.best_throughput_chart(runs.head(LATEST_RUNS)), width="content")


# A local image, not a :material/...: icon, whose favicon the browser fetches from a font CDN (offline: none).
st.set_page_config(page_title="BatchScope", page_icon=str(FAVICON), layout="wide")
user = team_view.gate()  # the sign-in page (and a stop) for a visitor who has not signed in
page = st.navigation([
    st.Page(home, title="Home", icon=":material/home:", default=True),
    st.Page("app_pages/new_sweep.py", title="New sweep", icon=":material/play_arrow:"),
    st.Page("app_pages/run.py", title="Run", icon=":material/monitoring:"),
    st.Page("app_pages/history.py", title="History", icon=":material/history:"),
    st.Page("app_pages/explain.py", title="Explain", icon=":material/school:"),
    *([st.Page("app_pages/audit.py", title="Audit", icon=":material/policy:")] if user.role == "admin" else []),
], position="top")
try:
    if resources.store().read_only:  # said once for every page; each action that would write is off
        st.info(plain(resources.store().read_only), icon=":material/lock:")
    page.run()
except Exception as error:  # last line of defence: a message, never a traceback
    resources.show_unexpected(error, f"showing the {page.title} page")
