"""New sweep: choose model, dtype, batch range, lengths and SLO; see memory per batch; launch.

Every widget starts from session state (form_state.start_state), so "run this again" on the Run page
can open this form filled in from a stored run's spec. The sections live in batchscope.ui.new_sweep_view;
each spec option's label, help and limits come from its declaration on SweepSpec.
"""
from __future__ import annotations

import streamlit as st

from batchscope.team import actions
from batchscope.ui import form as sweep_form
from batchscope.ui import form_state, new_sweep_view, resources, team_view
from batchscope.ui.plain_text import plain
from batchscope.ui.slo_control import URL_PARAM, slo_control, slo_param
from batchscope.ui.slo_control import refused as slo_refused
from batchscope.ui.spec_inputs import other_inputs, spec_input
from runners.spec import SpecError
from runners.spec.registry import is_load_driven, measures_a_server, sweeps_batch_size

form_state.start_state(st.session_state)
st.title("New sweep")
st.caption("Every number is measured on the device you pick; nothing is launched until the form is valid.")
team_view.queue_panel()
if not actions.may_launch(team_view.user()):
    st.info("You can browse runs as a viewer; launching sweeps needs the tuner role (ask an admin).")
    st.stop()

slots: new_sweep_view.Slots = {}
model_col, batch_col = st.columns(2)
with model_col:
    given, cluster = new_sweep_view.model_inputs(slots)
mode = given["mode"]
with batch_col:
    if sweeps_batch_size(mode):
        given.update(new_sweep_view.batch_inputs(slots))
    if measures_a_server(mode):
        given.update(new_sweep_view.server_inputs(slots))
    if is_load_driven(mode):
        given.update(new_sweep_view.load_inputs(mode, given.get("server_command", ""), slots))
    given.update(new_sweep_view.run_inputs(slots))

lengths, preview_cols, longest_slot = new_sweep_view.length_inputs(slots)
given.update(lengths)

st.subheader("Latency SLO")
slo = slo_control("slo", default_on=True, switch="Mark the largest batch that meets a latency SLO" if sweeps_batch_size(mode)
                  else "Mark the largest setting that meets a latency SLO (and count goodput against it)")
slots["slo"] = st.empty()

given["name"] = spec_input(st, "name", placeholder="e.g. llama-8b bf16 H200 baseline")
given["options"] = {**given.get("options", {}), **other_inputs(mode, set(given.get("options", {})))}

values = sweep_form.SweepForm(slo=slo, **given)
problems = {**actions.endpoint_problems(team_view.user(), values.spec_dict(),
                                       team_view.team_config().key_env_prefix),
            **sweep_form.check(values, cluster)}
new_sweep_view.show_problems(problems, slots)
blocked = len(problems) + slo_refused("slo")  # the SLO control says its own problem beside its field
note = sweep_form.batch_note(values) if sweeps_batch_size(mode) else None
if note:
    slots["batch_note"].caption(note)
new_sweep_view.show_lengths(values, problems, preview_cols, longest_slot)
new_sweep_view.show_memory(values)

read_only = resources.store().read_only  # a sweep is stored as it runs: not into a read-only history
launch = st.button("Launch sweep", type="primary", disabled=bool(blocked or read_only), key="launch",
                   help=read_only or ("Fix the messages above first." if blocked else "Runs in the background; "
                                      "you can close this tab."))
if blocked:
    st.caption(f"{blocked} problem(s) to fix before launching.")
if launch and not blocked and not read_only:
    try:
        team = team_view.team_config()
        run_id = actions.launch(resources.jobs(), team_view.user(), values.spec_dict(), team.queue_limit,
                                team.key_env_prefix)
    except SpecError as error:
        st.error(plain(f"{error.field}: {error.message}"))
    except actions.NotAllowed as refused:
        st.error(plain(str(refused)))
    else:
        params = {"run": run_id, **({URL_PARAM: slo_param(slo)} if slo is not None else {})}
        st.switch_page("app_pages/run.py", query_params=params)
