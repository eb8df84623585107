"""The New sweep page's sections: each draws its widgets (spec options through spec_inputs, with the
declared labels, help and limits), records where each field's message goes in `slots`, and returns the
values the SweepForm takes; app_pages/new_sweep.py only orders them."""
from __future__ import annotations

from typing import Any

import streamlit as st

from batchscope import charts
from batchscope.backends.ray_cluster import GpuType
from batchscope.ui import form as sweep_form
from batchscope.ui import resources, tables
from batchscope.ui.form_state import BATCH_MODES, LOADS, MODEL_SOURCES
from batchscope.ui.plain_text import plain
from batchscope.ui.spec_inputs import info_of, spec_input
from runners.engines.presets import PRESETS
from runners.engines.quant_layout import QUANT_DTYPES
from runners.spec.registry import DEFAULT_MODE, engine_is_remote, measures_a_server, schedules_slots, server_mode

Slots = dict[str, Any]
LENGTHS = ("prompt_len", "output_len")
DEVICE_HELP = ("auto uses the GPU when one is visible to the runner, else the CPU. With the endpoint engine: the "
               "GPU whose telemetry is sampled (auto: the first, when the server's URL is this host). A GPU type "
               "of the Ray cluster runs the sweep on a node that has one free, queued by Ray until one has.")


def model_inputs(slots: Slots) -> tuple[dict[str, Any], list[GpuType] | None]:
    """Model, dtype, engine, batching mode and device; with the Ray cluster's GPU types (None: no cluster)."""
    st.subheader("Model")
    source = st.radio("Model source", list(MODEL_SOURCES.values()), horizontal=True, key="model_source")
    if source == MODEL_SOURCES["preset"]:
        model = st.selectbox("Preset", list(PRESETS), key="preset",
                             help="Shapes of popular open models with random weights: nothing is downloaded.")
    else:
        model = st.text_input("Checkpoint directory", key="model_path",
                              placeholder="/models/Llama-3.1-8B (a folder holding config.json)")
    slots["model"] = st.empty()
    values = {"model": model or "", "dtype": spec_input(st, "dtype")}
    if values["dtype"] in QUANT_DTYPES:
        st.caption(QUANT_DTYPES[values["dtype"]])
    slots["dtype"] = st.empty()
    values["engine"] = spec_input(st, "engine")
    slots["engine"] = st.empty()
    if engine_is_remote(values["engine"]):
        values["mode"] = server_mode()  # a server is measured under an arrival rate or clients
        st.caption("The model above names the shapes the server runs: prompts are drawn in its vocabulary and "
                   "the roofline uses its size.")
    else:
        if measures_a_server(st.session_state.get("mode")):  # left by an endpoint run opened again
            st.session_state["mode"] = DEFAULT_MODE
        mode = info_of("mode")
        values["mode"] = st.selectbox(mode.label, [m for m in mode.choices if not measures_a_server(m)], key="mode",
                                      help=plain(mode.help))
    slots["mode"] = st.empty()
    cluster, cluster_problem = resources.cluster_gpus()
    devices = sweep_form.device_choices(cluster, st.session_state["device"])
    values["device"] = st.selectbox(info_of("device").label, list(devices), format_func=devices.get, key="device",
                                    help=DEVICE_HELP)
    if cluster_problem:
        st.warning(plain(cluster_problem), icon=":material/lan:")
    slots["device"] = st.empty()
    return values, cluster


def batch_inputs(slots: Slots) -> dict[str, Any]:
    """The static sweep's batch sizes: a From/To range of powers of two, or a list."""
    st.subheader("Batch sizes")
    batch_label = st.radio("Batch range", list(BATCH_MODES.values()), horizontal=True, key="batch_mode")
    values: dict[str, Any] = {"batch_mode": next(k for k, v in BATCH_MODES.items() if v == batch_label)}
    if values["batch_mode"] == "pow2":  # no min_value: the field shows what is typed, and a bad From is named
        lo_col, hi_col = st.columns(2)
        values["batch_lo"] = int(lo_col.number_input("From", step=1, key="batch_lo"))
        values["batch_hi"] = int(hi_col.number_input("To", step=1, key="batch_hi"))
    else:
        values["batch_list"] = st.text_input(info_of("batch_sizes").label, key="batch_list",
                                             help="Comma-separated whole numbers, e.g. 1,3,8,24")
    slots["batch_note"] = st.empty()
    slots["batch_sizes"] = st.empty()
    return values


def server_inputs(slots: Slots) -> dict[str, Any]:
    """The endpoint engine's server: where it answers, how it is asked, and how it restarts per point."""
    st.subheader("Server")
    values = {"url": spec_input(st, "url")}
    slots["url"] = st.empty()
    name_col, key_col = st.columns(2)
    values["model_name"] = spec_input(name_col, "model_name")
    values["api_key_env"] = spec_input(key_col, "api_key_env", placeholder="OPENAI_API_KEY")
    slots["api_key_env"] = key_col.empty()
    api_col, format_col = st.columns(2)
    values["options"] = {"api": spec_input(api_col, "api"), "prompt_format": spec_input(format_col, "prompt_format")}
    slots["api"], slots["prompt_format"] = api_col.empty(), format_col.empty()
    values["server_labels"] = spec_input(st, "server_labels",
                                         placeholder="vllm 0.11, max_num_seqs=256, max_num_batched_tokens=8192")
    values["server_command"] = spec_input(
        st, "server_command", placeholder="vllm serve meta-llama/Llama-3.1-8B --max-num-seqs {max_num_seqs}")
    slots["server_command"] = st.empty()
    return values


def load_inputs(mode: str, command: str, slots: Slots) -> dict[str, Any]:
    """The continuous and endpoint load: the batch limit, arrival rate or clients, and requests per repeat."""
    st.subheader("Continuous batching" if schedules_slots(mode) else "Load")
    st.caption("Sweep exactly one of max_num_seqs, arrival rates or concurrency (a comma list): that is "
               "the x axis of the charts." if schedules_slots(mode) else
               "Sweep arrival rates or concurrency (a comma list), or max_num_seqs through the restart "
               "command: that is the x axis of the charts.")
    values: dict[str, Any] = {}
    if schedules_slots(mode) or "{max_num_seqs}" in command:
        values["max_num_seqs"] = spec_input(st, "max_num_seqs")
        slots["max_num_seqs"] = st.empty()
    load = st.radio("Load", list(LOADS.values()), horizontal=True, key="load")
    values["load"] = next(k for k, v in LOADS.items() if v == load)
    values[values["load"]] = spec_input(st, values["load"])
    slots["arrival"] = slots["concurrency"] = st.empty()
    requests_col, budget_col = st.columns(2)
    values["num_requests"] = spec_input(requests_col, "num_requests")
    slots["num_requests"] = requests_col.empty()
    if schedules_slots(mode) or "{max_num_batched_tokens}" in command:
        values["max_num_batched_tokens"] = spec_input(budget_col, "max_num_batched_tokens")
        slots["max_num_batched_tokens"] = budget_col.empty()
    return values


def run_inputs(slots: Slots) -> dict[str, Any]:
    """Repeats, warm-up, seed, what an OOM point stops, and refinement's added points."""
    columns = st.columns(3)
    values = {name: spec_input(column, name) for column, name in zip(columns, ("repeats", "warmup", "seed"))}
    values.update({name: spec_input(st, name) for name in ("on_oom", "refine_points")})
    slots.update({name: st.empty() for name in values})
    return values


def length_inputs(slots: Slots) -> tuple[dict[str, str], list[Any], Any]:
    """Prompt and output length fields; with the columns their previews go in and the longest request's slot."""
    st.subheader("Request lengths")
    st.caption(f"Syntax: {plain(info_of('prompt_len').help)}")
    length_cols = st.columns(2)
    lengths = {name: spec_input(column, name) for column, name in zip(length_cols, LENGTHS)}
    slots.update({name: column.empty() for column, name in zip(length_cols, LENGTHS)})
    return lengths, st.columns(2), st.empty()


def show_lengths(values: sweep_form.SweepForm, problems: dict[str, str], preview_cols: list[Any],
                 longest_slot: Any) -> None:
    """The lengths the sweep will draw, so the preview and the context check agree."""
    drawn = sweep_form.sweep_lengths(values)
    for column, name in zip(preview_cols, LENGTHS):
        try:
            sampled = drawn[name == "output_len"] if drawn else sweep_form.length_preview(getattr(values, name),
                                                                                         values.seed)
        except ValueError:
            continue  # the message is shown in the field's slot
        column.altair_chart(charts.length_histogram(sampled, info_of(name).label), width="stretch")
        column.caption(sweep_form.length_summary(sampled, drawn_by_sweep=drawn is not None))
    if drawn:
        longest_slot.caption(sweep_form.longest_request(*drawn, sweep_form.context_of(values, problems)))


def show_memory(values: sweep_form.SweepForm) -> None:
    """Predicted memory per batch (per max_num_seqs), or why an endpoint sweep has none."""
    if measures_a_server(values.mode):
        st.subheader("Memory")
        st.caption("The server holds the memory, so there is no estimate here; when it runs on this host, the Run "
                   "page shows its GPU's memory.")
        return
    st.subheader("Predicted memory per max_num_seqs" if schedules_slots(values.mode) else "Predicted memory per batch")
    capacity = sweep_form.default_capacity(resources.store().runs(), values.device)
    capacity_gib = st.number_input("Device memory (GiB)", min_value=0.1, step=1.0, key=f"capacity_gib_{values.device}",
                                   value=round(capacity.bytes / sweep_form.GiB, 1))
    st.caption(f"Default {capacity.bytes / sweep_form.GiB:,.1f} GiB: {plain(capacity.source)}.")
    estimate = sweep_form.memory_estimate(values, int(capacity_gib * sweep_form.GiB))
    if estimate.error:
        st.info(plain(estimate.error))
        return
    shown = tables.rounded(estimate.table)
    st.dataframe(shown, hide_index=True, width="stretch", column_config=tables.column_config(shown))
    for warning in estimate.warnings:
        st.warning(plain(warning), icon=":material/memory:")


def show_problems(problems: dict[str, str], slots: Slots) -> None:
    """Each message beside its field (plain: a message quoting `uniform:1:100:` must not become an emoji)."""
    for name, message in problems.items():
        (slots.get(name) or slots.get("slo" if name.startswith("slo_") else "") or st).error(
            plain(message), icon=":material/error:")
