"""New sweep: choose model, dtype, batch range, lengths and SLO; see memory per batch; launch.

Every widget starts from session state (form_state.start_state), so "run this again" on the Run page
can open this form filled in from a stored run's spec.
"""
from __future__ import annotations

import streamlit as st

from batchscope import charts
from batchscope.ui import form as sweep_form
from batchscope.ui import form_state, resources, tables, team_view
from batchscope.team import actions
from batchscope.ui.form_state import BATCH_MODES, LOADS, MODEL_SOURCES
from batchscope.ui.plain_text import plain
from batchscope.ui.slo_control import URL_PARAM, slo_control, slo_param
from batchscope.ui.slo_control import refused as slo_refused
from runners.distributions import SYNTAX
from runners.presets import PRESETS
from runners.quant_layout import QUANT_DTYPES
from runners.spec import DTYPES, ENGINES, MODES, SpecError

form_state.start_state(st.session_state)
st.title("New sweep")
st.caption("Every number is measured on the device you pick; nothing is launched until the form is valid.")
team_view.queue_panel()
if not actions.may_launch(team_view.user()):
    st.info("You can browse runs as a viewer; launching sweeps needs the tuner role (ask an admin).")
    st.stop()

slots: dict[str, st.delta_generator.DeltaGenerator] = {}
model_col, batch_col = st.columns(2)
with model_col:
    st.subheader("Model")
    source = st.radio("Model source", list(MODEL_SOURCES.values()), horizontal=True, key="model_source")
    if source == MODEL_SOURCES["preset"]:
        model = st.selectbox("Preset", list(PRESETS), key="preset",
                             help="Shapes of popular open models with random weights: nothing is downloaded.")
    else:
        model = st.text_input("Checkpoint directory", key="model_path",
                              placeholder="/models/Llama-3.1-8B (a folder holding config.json)")
    slots["model"] = st.empty()
    dtype = st.selectbox("dtype", DTYPES, key="dtype",
                         help="fp8, fp8-dynamic and int8 quantise the weights inside the fast engine.")
    if dtype in QUANT_DTYPES:
        st.caption(QUANT_DTYPES[dtype])
    slots["dtype"] = st.empty()
    engine = st.selectbox("Engine", ENGINES, key="engine",
                          help="hf-generate is plain model.generate(); fast is BatchScope's CUDA-graph engine; "
                               "endpoint measures a running OpenAI-compatible server (vLLM, SGLang, TGI, "
                               "TensorRT-LLM, or python -m runners serve).")
    slots["engine"] = st.empty()
    if engine == "endpoint":
        mode = "endpoint"  # a server is measured under an arrival rate or clients
        st.caption("The model above names the shapes the server runs: prompts are drawn in its vocabulary and "
                   "the roofline uses its size.")
    else:
        if st.session_state.get("mode") == "endpoint":  # left by an endpoint run opened again
            st.session_state["mode"] = "static"
        mode = st.selectbox("Batching mode", [m for m in MODES if m != "endpoint"], key="mode",
                            help="static: fixed batches; continuous: requests arrive and join a running batch "
                                 "(fast engine).")
    slots["mode"] = st.empty()
    cluster, cluster_problem = resources.cluster_gpus()
    devices = sweep_form.device_choices(cluster, st.session_state["device"])
    device = st.selectbox("Device", list(devices), format_func=devices.get, key="device",
                          help="auto uses the GPU when one is visible to the runner, else the CPU. With the "
                               "endpoint engine: the GPU whose telemetry is sampled (auto: the first, when the "
                               "server's URL is this host). A GPU type of the Ray cluster runs the sweep on a "
                               "node that has one free, queued by Ray until one has.")
    if cluster_problem:
        st.warning(plain(cluster_problem), icon=":material/lan:")
    slots["device"] = st.empty()
with batch_col:
    batch_mode, batch_lo, batch_hi, batch_list = "pow2", 1, 1, ""  # unused in continuous mode
    if mode == "static":
        st.subheader("Batch sizes")
        batch_label = st.radio("Batch range", list(BATCH_MODES.values()), horizontal=True, key="batch_mode")
        batch_mode = next(k for k, v in BATCH_MODES.items() if v == batch_label)
        if batch_mode == "pow2":  # no min_value: the field shows what is typed, and a bad From is named
            lo_col, hi_col = st.columns(2)
            batch_lo = lo_col.number_input("From", step=1, key="batch_lo")
            batch_hi = hi_col.number_input("To", step=1, key="batch_hi")
        else:
            batch_list = st.text_input("Batch sizes", key="batch_list", help="Comma-separated whole numbers, e.g. 1,3,8,24")
        slots["batch_note"] = st.empty()
        slots["batch_sizes"] = st.empty()
    continuous: dict = {}
    if mode == "endpoint":
        st.subheader("Server")
        continuous["url"] = st.text_input("Base URL", key="url",
                                          help="The server's OpenAI-compatible API; this host by default.")
        slots["url"] = st.empty()
        name_col, key_col = st.columns(2)
        continuous["model_name"] = name_col.text_input("Served model name", key="model_name",
                                                       help="As the server's /v1/models lists it; empty: its first.")
        continuous["api_key_env"] = key_col.text_input(
            "API key variable", key="api_key_env", placeholder="OPENAI_API_KEY",
            help="The name of an environment variable the runner reads the key from; the key is never stored.")
        slots["api_key_env"] = key_col.empty()
        continuous["server_labels"] = st.text_input(
            "Server labels", key="server_labels", placeholder="vllm 0.11, max_num_seqs=256, max_num_batched_tokens=8192",
            help="The server's own knobs and version as you know them: recorded with the run and its fingerprint.")
        continuous["server_command"] = st.text_input(
            "Restart command per point (optional)", key="server_command",
            placeholder="vllm serve meta-llama/Llama-3.1-8B --max-num-seqs {max_num_seqs}",
            help="Run before each point (as a list of words, never through a shell) and waited for until the URL "
                 "answers; {max_num_seqs} and {max_num_batched_tokens} become the point's values.")
        slots["server_command"] = st.empty()
    if mode in ("continuous", "endpoint"):
        command = continuous.get("server_command", "")
        st.subheader("Continuous batching" if mode == "continuous" else "Load")
        st.caption("Sweep exactly one of max_num_seqs, arrival rates or concurrency (a comma list): that is "
                   "the x axis of the charts." if mode == "continuous" else
                   "Sweep arrival rates or concurrency (a comma list), or max_num_seqs through the restart "
                   "command: that is the x axis of the charts.")
        if mode == "continuous" or "{max_num_seqs}" in command:
            continuous["max_num_seqs"] = st.text_input("max_num_seqs", key="max_num_seqs",
                                                       help="Running-batch limit: 8, 1,2,4 or pow2:1:256")
            slots["max_num_seqs"] = st.empty()
        load = st.radio("Load", list(LOADS.values()), horizontal=True, key="load")
        continuous["load"] = next(k for k, v in LOADS.items() if v == load)
        if continuous["load"] == "arrival":
            continuous["arrival"] = st.text_input("Arrival rate", key="arrival",
                                                  help="poisson:RATE requests/s, or poisson:1,2,4 to sweep")
        else:
            continuous["concurrency"] = st.text_input("Concurrent clients", key="concurrency",
                                                      help="N clients, or a list like 1,4,16 to sweep")
        slots["arrival"] = slots["concurrency"] = st.empty()
        requests_col, budget_col = st.columns(2)
        continuous["num_requests"] = int(requests_col.number_input("Requests per repeat", min_value=1,
                                                                   max_value=sweep_form.MOST["num_requests"],
                                                                   key="num_requests"))
        slots["num_requests"] = requests_col.empty()
        if mode == "continuous" or "{max_num_batched_tokens}" in command:
            continuous["max_num_batched_tokens"] = int(budget_col.number_input(
                "Token budget per step", min_value=1, key="max_num_batched_tokens",
                help="max_num_batched_tokens: prefill chunk tokens + one per decoding sequence"))
            slots["max_num_batched_tokens"] = budget_col.empty()
    repeats_col, warmup_col, seed_col = st.columns(3)
    repeats = repeats_col.number_input("Repeats", min_value=1, max_value=50, key="repeats")
    warmup = warmup_col.number_input("Warm-up", min_value=0, max_value=20, key="warmup")
    seed = seed_col.number_input("Seed", min_value=0, max_value=sweep_form.MOST["seed"], key="seed")
    on_oom = st.radio("After an out-of-memory point", ["stop", "continue"], horizontal=True, key="on_oom",
                      help="stop: larger batches are not tried; continue: every batch is tried.")
    refine_points = st.number_input("Points to add by refinement", min_value=0, max_value=16, key="refine_points",
                                    help="After the planned points the runner adds up to this many, between the "
                                         "last that meets the SLO below and the first that breaks it, then below "
                                         "the throughput plateau (docs/trust.md). 0: none.")

st.subheader("Request lengths")
st.caption(f"Syntax: {plain(SYNTAX)}")
length_cols = st.columns(2)
lengths = {field: column.text_input(label, key=field) for column, (field, label) in
           zip(length_cols, (("prompt_len", "Prompt length"), ("output_len", "Output length")))}
slots.update({field: column.empty() for column, field in zip(length_cols, lengths)})
preview_cols = st.columns(2)
longest_slot = st.empty()

st.subheader("Latency SLO")
slo = slo_control("slo", default_on=True, switch="Mark the largest batch that meets a latency SLO" if mode == "static"
                  else "Mark the largest setting that meets a latency SLO (and count goodput against it)")
slots["slo"] = st.empty()

name = st.text_input("Run name (optional)", key="name", placeholder="e.g. llama-8b bf16 H200 baseline")

values = sweep_form.SweepForm(
    model=model or "", dtype=dtype, engine=engine, mode=mode, device=device, batch_mode=batch_mode,
    batch_lo=int(batch_lo), batch_hi=int(batch_hi), batch_list=batch_list, prompt_len=lengths["prompt_len"],
    output_len=lengths["output_len"], repeats=int(repeats), warmup=int(warmup), seed=int(seed),
    on_oom=on_oom, name=name, slo=slo, refine_points=int(refine_points), **continuous)
problems = sweep_form.check(values, cluster)
for field, message in problems.items():  # plain: a message quoting `uniform:1:100:` must not become an emoji
    (slots.get(field) or slots.get("slo" if field.startswith("slo_") else "") or st).error(
        plain(message), icon=":material/error:")
blocked = len(problems) + slo_refused("slo")  # the SLO control says its own problem beside its field
note = sweep_form.batch_note(values) if mode == "static" else None
if note:
    slots["batch_note"].caption(note)

drawn = sweep_form.sweep_lengths(values)  # what the sweep will draw, so preview and context check agree
for column, (field, label) in zip(preview_cols, (("prompt_len", "Prompt length"), ("output_len", "Output length"))):
    try:
        sampled = drawn[field == "output_len"] if drawn else sweep_form.length_preview(lengths[field], int(seed))
    except ValueError:
        continue  # the message is shown in the field's slot
    column.altair_chart(charts.length_histogram(sampled, label), width="stretch")
    column.caption(sweep_form.length_summary(sampled, drawn_by_sweep=drawn is not None))
if drawn:
    longest_slot.caption(sweep_form.longest_request(*drawn, sweep_form.context_of(values, problems)))

if values.mode == "endpoint":
    st.subheader("Memory")
    st.caption("The server holds the memory, so there is no estimate here; when it runs on this host, the Run page "
               "shows its GPU's memory.")
else:
    st.subheader("Predicted memory per max_num_seqs" if values.mode == "continuous" else "Predicted memory per batch")
    capacity = sweep_form.default_capacity(resources.store().runs(), device)
    capacity_gib = st.number_input("Device memory (GiB)", min_value=0.1, value=round(capacity.bytes / sweep_form.GiB, 1),
                                   step=1.0, key=f"capacity_gib_{device}")
    st.caption(f"Default {capacity.bytes / sweep_form.GiB:,.1f} GiB: {plain(capacity.source)}.")
    estimate = sweep_form.memory_estimate(values, int(capacity_gib * sweep_form.GiB))
    if estimate.error:
        st.info(plain(estimate.error))
    else:
        shown = tables.rounded(estimate.table)
        st.dataframe(shown, hide_index=True, width="stretch", column_config=tables.column_config(shown))
        for warning in estimate.warnings:
            st.warning(plain(warning), icon=":material/memory:")

read_only = resources.store().read_only  # a sweep is stored as it runs: not into a read-only history
launch = st.button("Launch sweep", type="primary", disabled=bool(blocked or read_only), key="launch",
                   help=read_only or ("Fix the messages above first." if blocked else "Runs in the background; "
                                      "you can close this tab."))
if blocked:
    st.caption(f"{blocked} problem(s) to fix before launching.")
if launch and not blocked and not read_only:
    try:
        run_id = actions.launch(resources.jobs(), team_view.user(), values.spec_dict(),
                                team_view.team_config().queue_limit)
    except SpecError as error:
        st.error(plain(f"{error.field}: {error.message}"))
    except actions.NotAllowed as refused:
        st.error(plain(str(refused)))
    else:
        params = {"run": run_id, **({URL_PARAM: slo_param(slo)} if slo is not None else {})}
        st.switch_page("app_pages/run.py", query_params=params)
