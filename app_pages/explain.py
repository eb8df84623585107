"""Explain: a guided walk through one run for a room — six steps, each one chart and two sentences.

The sentences come from `batchscope.explain`, built from the run's own numbers; this page only picks
the run and the SLO, and lays the steps out one after another or, in present mode, one at a time.
"""
from __future__ import annotations

import streamlit as st

from batchscope.explain import Step
from batchscope.explain_charts import resize
from batchscope.ui import explain_view, resources, run_view
from batchscope.ui.history_view import overlay_labels
from batchscope.ui.slo_control import slo_control

PRESENT_WIDTH, PRESENT_HEIGHT = 880, 440

st.title("Explain")
store = resources.store()
runs = resources.runs_or_stop()

run_ids = runs["run_id"].tolist()
if st.session_state.get("explain_run") not in run_ids:
    st.session_state["explain_run"] = explain_view.default_run(runs, lambda rid: resources.load_run(rid, None))
labels = overlay_labels(runs, run_ids)
demo = dict(zip(runs["run_id"], runs["demo"].fillna(False)))
st.selectbox("Run to explain", run_ids, key="explain_run",
             format_func=lambda rid: f"{labels[rid]}{' (demo)' if demo.get(rid) else ''} — {rid}")
run_id = st.session_state["explain_run"]
data = resources.load_run(run_id, None)
if data is None or data.analysis is None or data.table.empty:
    st.info("This run has no finished points yet, so there is nothing to explain. Pick another run.")
    st.stop()
if data.analysis.axis.key != "batch_size":
    st.info(f"This online-serving run sweeps {data.analysis.axis.noun}; the six steps explain how a static batch "
            "size moves throughput, latency and memory. Open it on the Run page, or pick a static sweep.")
    st.page_link("app_pages/run.py", label="Open this run", query_params={"run": run_id}, icon=":material/open_in_new:")
    st.stop()

slo = slo_control("explain_slo", switch=None,
                  span=lambda metric, percentile: explain_view.slo_range(data.table, f"{metric}_ms_p{percentile}"))
if slo is not None:
    data = resources.load_run(run_id, slo)
steps: list[Step] = explain_view.walk(data, runs, lambda rid: resources.load_run(rid, None),
                                      lambda rid: (store.run(rid) or {}).get("spec"), slo)

present = st.toggle("Present: one step at a time, large", key="explain_present")


def show_step(number: int, step: Step, large: bool) -> None:
    """One step: title, chart, and its two sentences (headers in present mode so a room can read them)."""
    if large:
        st.markdown(f"## {number}. {step.title}")
        st.altair_chart(resize(step.chart, PRESENT_WIDTH, PRESENT_HEIGHT), width="content")
        for sentence in step.sentences:
            st.markdown(f"### {sentence}")
    else:
        st.subheader(f"{number}. {step.title}")
        st.altair_chart(step.chart, width="content")
        for sentence in step.sentences:
            st.markdown(sentence)


def move(delta: int) -> None:
    st.session_state["explain_step"] = min(max(st.session_state.get("explain_step", 0) + delta, 0), len(steps) - 1)


if present:
    index = min(st.session_state.get("explain_step", 0), len(steps) - 1)
    st.session_state["explain_step"] = index
    back, where, forward = st.columns([1, 2, 1])
    back.button("Previous", icon=":material/arrow_back:", key="explain_previous", on_click=move, args=(-1,),
                disabled=index == 0, width="stretch")
    where.markdown(f"<div style='text-align:center'>step {index + 1} of {len(steps)}</div>", unsafe_allow_html=True)
    forward.button("Next", icon=":material/arrow_forward:", key="explain_next", on_click=move, args=(1,),
                   disabled=index == len(steps) - 1, width="stretch")
    show_step(index + 1, steps[index], large=True)
else:
    st.caption(f"{run_view.run_title(data.run)} · {len(steps)} steps, every sentence computed from this run's numbers."
               + ("" if any(step.key == "contrast" for step in steps) else
                  " No run of the other engine on this model and dtype is stored, so there is no engine contrast."))
    for number, step in enumerate(steps, start=1):
        show_step(number, step, large=False)
        st.divider()
