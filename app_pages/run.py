"""Run: one sweep's live progress and workload, then its linked charts, markers, points table and fingerprint.

The URL carries the run (`?run=<id>`) and the SLO (`&slo=ttft:95:500`), so a link can be shared.
"""
from __future__ import annotations

from datetime import datetime

import streamlit as st

from batchscope import charts, timeline
from batchscope.analysis.cost import at_working_point, device_type, with_cost
from batchscope.analysis.model_facts import quant_note
from batchscope.endpoint_text import endpoint_lines
from batchscope.team import actions
from batchscope.ui import answers_view, form_state, quant_error_view, resources, run_view, tables, team_view
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


def show_outcome(progress: dict) -> None:
    """How a finished run ended, in one message."""
    state = progress.get("state")
    if state == "failed":
        st.error(plain(f"The sweep failed: {progress.get('error') or 'no error text recorded'}"))
    elif state == "interrupted":
        reason = progress.get("error") or "it was killed, or the app or machine restarted"
        st.warning(plain(f"The runner stopped without finishing ({reason}); finished points are kept."))
    elif state == "cancelled":
        st.info("The sweep was cancelled; finished points are kept.")
    elif state == "done" and progress.get("error"):  # some points failed (runners.outcome)
        st.warning(plain(f"The sweep finished, but {progress['error']}"))
    if progress.get("stopped_early"):
        st.info(plain(progress["stopped_early"]))


def show_results(data: run_view.RunData, progress: dict) -> None:
    """Charts, marker sentences, the points table, downloads and the fingerprint."""
    if data.analysis is None:
        st.info(run_view.no_results_words(progress))
        return
    noisy = run_view.noise_warning(data.run, data.table, data.analysis.axis)
    if noisy:
        st.warning(plain(noisy), icon=":material/ssid_chart:")
    st.vega_lite_chart(spec=charts.linked_charts(data.table, data.analysis, slo, percentile=percentile,
                                                 memory_split=data.split, run=data.run.get("name") or run_id,
                                                 per_gpu=data.per_gpu),
                       width="content")
    st.caption("Hover a point in any chart to highlight it in all of them and read its values. Dashed vertical "
               "rules mark the knee markers and the working point; red rules mark out-of-memory batches.")
    for line in (answers_view.trust_words(data.table, data.analysis.axis),
                 answers_view.refinement_words(data.table, data.analysis.axis)):
        if line:
            st.caption(plain(line))
    st.subheader("What the markers say")
    for sentence in run_view.marker_sentences(data.analysis):
        st.markdown(f"- {plain(sentence)}")
    price = price_control(device_type(data.run))
    cost_line = at_working_point(data.table, data.analysis.working_point, price)
    if cost_line:
        st.markdown(f"- {plain(cost_line)}")
    st.subheader("Every point")
    shown = run_view.points_display(with_cost(data.table, price))
    st.dataframe(shown, hide_index=True, width="stretch", column_config=tables.column_config(shown))
    with st.expander("How each point's trust is judged", expanded=False):
        st.caption("Each metric of a point (throughput, every latency percentile, memory) gets its own verdict: "
                   "its worst check, with the reasons beside the numbers in the table and in each chart's tooltip. "
                   "Checks whose data this run did not record are left out. A point is drawn hollow on the chart "
                   "of a metric whose verdict is untrusted; the working point passes over a point whose throughput "
                   "or SLO latency is untrusted, saying so.")
        st.dataframe(answers_view.rules_table(), hide_index=True, width="stretch")
    for line in run_view.failures(data.table, data.analysis.axis) + run_view.request_failures(data.table,
                                                                                             data.analysis.axis):
        st.caption(plain(line))
    csv_col, parquet_col = st.columns(2)
    csv_col.download_button("Download CSV", run_view.csv_bytes(data.table), file_name=f"{run_id}.csv",
                            mime="text/csv", icon=":material/download:")
    parquet_col.download_button("Download Parquet", run_view.parquet_bytes(data.table),
                                file_name=f"{run_id}.parquet", mime="application/vnd.apache.parquet",
                                icon=":material/download:")


def price_control(gpu: str) -> float | None:
    """The price per GPU-hour of this run's GPU type: a setting kept in the history for every run on it."""
    key = f"gpu_hour_price_{gpu}"
    if key not in st.session_state:
        st.session_state[key] = answers_view.stored_price(store, gpu)
    price = st.number_input(f"Price per GPU-hour of {gpu} (for cost per 1M output tokens)", min_value=0.0,
                            step=0.5, format="%.2f", key=key, placeholder="not set", disabled=bool(store.read_only),
                            help=store.read_only or "Kept per GPU type for every run on it (and for `python -m "
                                 "batchscope report`). Cost per 1M output tokens = price × GPUs ÷ (output tok/s × "
                                 "3600) × 10⁶.")
    if price != answers_view.stored_price(store, gpu):
        answers_view.save_price(store, gpu, price)
    return price


def show_timeline(data: run_view.RunData) -> None:
    """One point's steps over time: slots, KV cache and token mix (the story behind its averages)."""
    choices = run_view.timeline_points(data.table, data.analysis.axis) if data.analysis is not None else {}
    if not choices:
        return
    with st.expander("Inside one point: its steps over time", expanded=False):
        point_col, repeat_col = st.columns(2)
        point = point_col.selectbox("Point", list(choices), format_func=choices.get, key=f"timeline_point_{run_id}")
        steps = store.steps(run_id, point)
        repeats = sorted(int(r) for r in steps["repeat"].unique() if r >= 0)
        if not repeats:
            st.info("This point recorded no steps.")
            return
        repeat = repeat_col.selectbox("Repeat", repeats, format_func=lambda r: f"repeat {r + 1}",
                                      key=f"timeline_repeat_{run_id}")
        steps = steps[steps["repeat"] == repeat]
        replicas = run_view.step_replicas(steps)
        if len(replicas) > 1:  # each replica steps on its own clock: one at a time
            replica = st.selectbox("Replica", replicas, key=f"timeline_replica_{run_id}")
            steps = steps[steps["replica"] == replica]
        chart = timeline.timeline_chart(steps, *run_view.timeline_limits(data.table, point))
        if chart is None:
            st.info("This point's steps recorded no slot, KV cache or token counts.")
            return
        st.altair_chart(chart, width="content")
        st.caption("A continuous point admits requests up to max_num_seqs and while the KV cache has room; a "
                   "static batch keeps its width while its rows finish, so the gap between the two slot lines "
                   "is padding the GPU still computes.")


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


def show_fingerprint(data: run_view.RunData) -> None:
    with st.expander("Environment fingerprint", expanded=False):
        if not data.run.get("env"):
            st.info("The runner has not recorded its environment yet.")
        else:
            st.dataframe(run_view.env_rows(data.run["env"]), hide_index=True, width="stretch")
        if data.run.get("calibration"):
            st.caption("Measured ceilings (calibration)")
            st.json(data.run["calibration"], expanded=False)


def run_body(live_at_start: bool) -> None:
    try:
        progress = resources.jobs().progress(run_id)
    except KeyError:
        st.error(plain(f"Run {run_id} has disappeared from the history."))
        return
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
    live = run_view.is_live(progress)
    if progress.get("state") in run_view.LIVE_STATES:
        show_progress(progress, data.run.get("spec") or {}, len(data.table))
    else:
        show_outcome(progress)
        if live:
            st.caption("Storing the last results…")
    show_results(data, progress)
    show_timeline(data)
    show_fingerprint(data)
    if live_at_start and not live:
        st.rerun(scope="app")  # finished: redraw once without the refresh timer


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
