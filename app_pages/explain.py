"""Explain: a guided walk through one run for a room — each step one chart and two sentences.

The sentences come from `batchscope.explain`, built from the run's own numbers; this page only picks
the run and the SLO, and lays the steps out one after another or, in present mode, one at a time on
one screen (keys and clickers move it). Run, step and present mode are kept in the URL
(`explain_present`), so a reload or a shared link opens the same place.
"""
from __future__ import annotations

import streamlit as st

from batchscope.explain.step import Step
from batchscope.ui import explain_present, explain_view, export_view, resources, run_view
from batchscope.ui.explain_present import Place
from batchscope.ui.history_view import overlay_labels
from batchscope.ui.present_keys import present_keys
from batchscope.ui.slo_control import slo_control

RUN, STEP, PRESENT = "explain_run", "explain_step", "explain_present"
# the URL this page last wrote; the notes on the link it last read, and the place they are about
PUBLISHED, NOTES, NOTED_AT = "explain_published", "explain_notes", "explain_noted_at"

runs = resources.runs_or_stop()
run_ids = runs["run_id"].tolist()
session = st.session_state


def default_id() -> str | None:
    """The run whose walk makes the case (it analyses candidates, so only asked when a place needs it)."""
    return resources.explain_default(runs)


def place_now() -> Place:
    """Where the page stands now, from its session state."""
    return Place(session.get(RUN), session.get(STEP, 0), bool(session.get(PRESENT, False)))

url = {name: st.query_params[name] for name in explain_present.PARAMS if name in st.query_params}
if url != session.get(PUBLISHED):  # a link opened (or reloaded), not the URL this page wrote
    place, notes = explain_present.from_url(url, place_now(), run_ids, default_id)
    session.update({RUN: place.run, STEP: place.step, PRESENT: place.present, NOTES: notes})
    session.pop(NOTED_AT, None)  # the notes are about the place this run settles on
if session.get(RUN) not in run_ids:
    session[RUN], session[STEP] = default_id(), 0
present = bool(session.get(PRESENT, False))

if present:
    st.markdown(explain_present.PRESENT_CSS, unsafe_allow_html=True)
    # top-aligned: opening the expander pushes the step down, not the buttons; an expander, not a popover,
    # whose never-opened widgets lose their values when the keys component reruns the page
    settings, back, where, forward, switch = st.columns([3, 1, 1.2, 1, 1.6], vertical_alignment="top")
    controls = settings.expander("Run and SLO", icon=":material/tune:")
else:
    st.title("Explain")
    controls = st.container()
    switch = controls

labels = overlay_labels(runs, run_ids)
demo = dict(zip(runs["run_id"], runs["demo"].fillna(False)))
controls.selectbox("Run to explain", run_ids, key=RUN, on_change=lambda: session.update({STEP: 0}),
                   format_func=lambda rid: f"{labels[rid]}{' (demo)' if demo.get(rid) else ''} — {rid}")
switch.toggle("Present: one step at a time, large", key=PRESENT)
run_id = session[RUN]

def publish(place: Place) -> None:
    """Write the place to the URL and remember it; notes about the link last read last until the place moves."""
    session[PUBLISHED] = explain_present.write_url(st.query_params, place)
    if session.setdefault(NOTED_AT, place) != place:
        session[NOTES], session[NOTED_AT] = [], place

def show_notes() -> None:
    """What could not be used of the link that opened the page, and what opened instead."""
    for note in session.get(NOTES, []):
        st.warning(note, icon=":material/link_off:")

data = resources.load_run(run_id, None)
if data is None or data.analysis is None or data.table.empty:
    publish(place_now())
    show_notes()
    st.info("This run has no finished points yet, so there is nothing to explain. Pick another run.")
    st.stop()
if data.analysis.axis.key != "batch_size":
    publish(place_now())
    show_notes()
    st.info(f"This online-serving run sweeps {data.analysis.axis.noun}; the steps explain how a static batch "
            "size moves throughput, latency and memory. Open it on the Run page, or pick a static sweep.")
    st.page_link("app_pages/run.py", label="Open this run", query_params={"run": run_id}, icon=":material/open_in_new:")
    st.stop()

with controls:
    slo = slo_control("explain_slo", switch=None,
                      span=lambda metric, percentile: explain_view.slo_range(data.table,
                                                                             f"{metric}_ms_p{percentile}"))
if slo is not None:
    data = resources.load_run(run_id, slo)
steps: list[Step] = resources.explain_walk(run_id, slo, runs)
index, past_end = explain_present.clamp_step(session.get(STEP, 0), len(steps))
if past_end and past_end not in session.get(NOTES, []):
    session[NOTES] = [*session.get(NOTES, []), past_end]
session[STEP] = index
publish(place_now())
with controls:
    export_view.explain_downloads(data, steps, index if present else None)

def move(delta: int) -> None:
    session[STEP] = min(max(session.get(STEP, 0) + delta, 0), len(steps) - 1)

if present:
    back.button("Previous", icon=":material/arrow_back:", key="explain_previous", on_click=move, args=(-1,),
                disabled=index == 0, width="stretch")
    where.markdown(f"<div style='text-align:center; padding-top:0.5rem'>step {index + 1} of {len(steps)}</div>",
                   unsafe_allow_html=True)
    forward.button("Next", icon=":material/arrow_forward:", key="explain_next", on_click=move, args=(1,),
                   disabled=index == len(steps) - 1, width="stretch")
    with where:
        viewport = present_keys("explain_next", "explain_previous", key="explain_keys",
                                quiet=explain_present.DRAWN_AS_DEFAULT)
    show_notes()
    step = steps[index]
    st.markdown(f"## {index + 1}. {step.title}")
    chart, words = st.columns([explain_present.CHART_SHARE, 1 - explain_present.CHART_SHARE],
                              vertical_alignment="center", gap="medium")
    chart.container(key="explain_chart").altair_chart(explain_present.present_chart(step.chart, viewport),
                                                     width="content")
    st.markdown(explain_present.sentence_css(step.sentences), unsafe_allow_html=True)
    with words.container(key="explain_sentences"):
        for sentence in step.sentences:
            st.markdown(sentence)
else:
    show_notes()
    st.caption(f"{run_view.run_title(data.run)} · {len(steps)} steps, every sentence computed from this run's numbers."
               + ("" if any(step.key == "contrast" for step in steps) else
                  " No run of the other engine on this model and dtype is stored, so there is no engine contrast."))
    for number, step in enumerate(steps, start=1):
        st.subheader(f"{number}. {step.title}")
        st.altair_chart(step.chart, width="content")
        export_view.png_button(step.chart, f"{run_id}-step-{number}", key=f"explain_png_{number}")
        for sentence in step.sentences:
            st.markdown(sentence)
        st.divider()
