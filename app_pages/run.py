"""Run: one sweep's live progress and workload, then its linked charts, markers, points table and fingerprint.

The URL carries the run (`?run=<id>`) and the SLO (`&slo=ttft:95:500`), so a link can be shared.
"""
from __future__ import annotations

from datetime import datetime

import streamlit as st

from batchscope.analysis.model_facts import quant_note
from batchscope.endpoint_text import endpoint_lines
from batchscope.team import actions
from batchscope.ui import form_state, quant_error_view, resources, run_sections, run_view, team_view
from batchscope.ui.history_view import overlay_labels
from batchscope.ui.plain_text import plain
from batchscope.ui.slo_control import latency_choice, slo_control

REFRESH_SECONDS = 2.0

st.title("Run")
store = resources.store()
runs = resources.runs_or_stop()

run_ids = runs["run_id"].tolist()
st.session_state["run_select"], unknown = run_view.pick_run(
    run_ids, st.query_params.get("run"), st.session_state.get("run_select"), run_view.informative_run(runs))
if unknown:
    st.error(plain(unknown))
labels = overlay_labels(runs, run_ids)


def _follow_selection() -> None:
    st.query_params["run"] = st.session_state["run_select"]


st.selectbox("Run", run_ids, key="run_select", format_func=lambda rid: f"{labels[rid]} — {rid}",
             on_change=_follow_selection)
run_id = st.session_state["run_select"]
st.query_params["run"] = run_id

slo = slo_control("run_slo", url=True)
percentile = latency_choice("run_slo")[1]


def show_progress(progress: dict, spec: dict, stored: int) -> None:
    """The live strip: bar, current point, elapsed, ETA and the cancel button, which stays pressed and
    says so until the runner stops."""
    view = run_view.progress_view(progress, run_view.most_runs(spec), run_view.point_labels(spec), stored)
    st.progress(view.fraction, text=view.headline)
    if view.current:
        st.caption(f"Now: {view.current}")
    elapsed_col, eta_col, cancel_col = st.columns(3)
    elapsed_col.metric("Elapsed", view.elapsed)
    eta_col.metric("ETA", view.eta)
    asked = f"cancel_requested_{run_id}"
    if not actions.may_manage(team_view.user(), (store.run(run_id) or {}).get("owner")):
        cancel_col.caption("Only its owner or an admin may cancel this sweep.")
        return
    cancel_col.button("Cancelling…" if asked in st.session_state else "Cancel sweep", icon=":material/stop_circle:",
                      key=f"cancel_{run_id}", disabled=asked in st.session_state or bool(store.read_only),
                      help=store.read_only, on_click=request_cancel, args=(asked,))
    if st.session_state.get(asked) == UNKNOWN:
        st.warning("This run is no longer known to the job queue.")
    elif asked in st.session_state:
        st.info(f"Cancel requested at {st.session_state[asked]}: the sweep stops at the next step and keeps "
                f"its finished points.", icon=":material/stop_circle:")


UNKNOWN = "unknown to the job queue"


def request_cancel(asked: str) -> None:
    """Ask the runner to stop, and remember when, so the button is drawn pressed (before the redraw)."""
    try:
        actions.cancel(resources.jobs(), team_view.user(), run_id)
    except KeyError:
        st.session_state[asked] = UNKNOWN
    except actions.NotAllowed as refused:  # the button is not drawn for them; a scripted click lands here
        st.error(plain(str(refused)))
    else:
        st.session_state[asked] = datetime.now().strftime("%H:%M:%S")


def show_workload(spec: dict, env: dict | None) -> None:
    """What each point ran (lengths, repeats, requests; how an endpoint's requests were made), and a way to
    run it again with one thing changed."""
    text_col, again_col = st.columns([4, 1], vertical_alignment="center")
    for line in run_view.workload_lines(spec) + endpoint_lines(env):
        text_col.caption(plain(line))
    if again_col.button("Run this again / change one thing", icon=":material/replay:", key=f"again_{run_id}",
                        disabled=not spec, help="Opens New sweep filled in with this run's settings and SLO."):
        st.session_state.update(form_state.widget_state(form_state.form_from_spec(spec, slo)))
        st.switch_page("app_pages/new_sweep.py")


def run_body(live_at_start: bool) -> None:
    try:
        progress = resources.jobs().progress(run_id)
    except KeyError:
        st.error(plain(f"Run {run_id} has disappeared from the history."))
        return
    live = run_view.is_live(progress)
    if live_at_start and not live:
        # finished: redraw once without the refresh timer, before this tick draws anything. A rerun asked for
        # after the outcome is on screen would fold into a link the user clicks on seeing it (Streamlit keeps
        # the newer request's page), and the click would be lost.
        st.rerun(scope="app")
    data = resources.load_run(run_id, slo)
    if data is None:
        st.error(plain(f"Run {run_id} has disappeared from the history."))
        return
    st.subheader(plain(run_view.run_title(data.run)))
    st.caption(plain(f"{run_id} · {progress.get('state')} · "
                     f"{data.run.get('fingerprint') or 'environment not recorded yet'}"))
    where = run_view.placement_words(progress, data.run.get("spec") or {})
    if where:
        st.caption(plain(where), help="BATCHSCOPE_RAY_ADDRESS sends sweeps to a Ray cluster's GPU nodes; each "
                                      "finished point comes back to this app as it is written.")
    show_workload(data.run.get("spec") or {}, data.run.get("env"))
    accuracy = quant_note(data.run.get("model"))
    if accuracy:
        st.caption(plain(f"Accuracy vs bfloat16: {accuracy}"))
    quant_error_view.show(store, run_id)
    if progress.get("state") in run_view.LIVE_STATES:
        show_progress(progress, data.run.get("spec") or {}, len(data.table))
    else:
        run_sections.show_outcome(progress, data)
        if live:
            st.caption("Storing the last results…")
    run_sections.show_results(store, data, progress, slo, percentile)
    run_sections.show_timeline(store, data)
    run_sections.show_fingerprint(data)


def guarded_body(live_at_start: bool) -> None:
    try:
        run_body(live_at_start)
    except Exception as error:  # a fragment rerun bypasses app.py's guard, so it has its own
        resources.show_unexpected(error, "showing this run")


try:
    is_live = run_view.is_live(resources.jobs().progress(run_id))
except KeyError:
    is_live = False
st.fragment(guarded_body, run_every=REFRESH_SECONDS if is_live else None)(is_live)
