"""The Run page's results, drawn below its progress strip: how the run ended, the linked charts and
marker sentences, the price control, every point, one point's steps over time and the fingerprint.
The words and tables come from `run_view` and `run_view_tables`; this module only lays them out."""
from __future__ import annotations

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from batchscope import charts, timeline
from batchscope.analysis import SLO
from batchscope.analysis.cost import at_working_point, device_type, with_cost
from batchscope.charts.layout import panel_width
from batchscope.charts.vega import inline_datasets
from batchscope.store import Store
from batchscope.ui import answers_view, export_view, run_view, run_view_tables, tables
from batchscope.ui.plain_text import plain
from batchscope.ui.present_keys import window_width
from batchscope.ui.run_cache import made


def show_outcome(progress: dict, data: run_view.RunData) -> None:
    """How a finished run ended, in one message; failed points in a few words each (their full errors are under
    the points table)."""
    state = progress.get("state")
    if state == "failed":
        st.error(plain(f"The sweep failed: {progress.get('error') or 'no error text recorded'}"))
    elif state == "interrupted":
        reason = progress.get("error") or "it was killed, or the app or machine restarted"
        st.warning(plain(f"The runner stopped without finishing ({reason}); finished points are kept."))
    elif state == "cancelled":
        st.info("The sweep was cancelled; finished points are kept.")
    elif state == "done" and progress.get("error"):  # some points failed (runners.results.outcome)
        # the runner's own line while its last points are still being stored, else the table's, in fewer words
        stored = data.analysis is not None and len(data.table) >= int(progress.get("points_done") or 0)
        failed = run_view_tables.failed_outcome(data.table, data.analysis.axis) if stored else None
        st.warning(plain(f"The sweep finished, but {failed or progress['error']}"))
    if progress.get("stopped_early"):
        st.info(plain(progress["stopped_early"]))


def show_results(store: Store, data: run_view.RunData, progress: dict, slo: SLO | None,
                 percentile: int) -> None:
    """Charts, marker sentences, the points table, downloads and the fingerprint. What they are made of is
    made once per analysis of the run (run_cache.made): a warm page only lays it out."""
    run_id = data.run["run_id"]
    if data.analysis is None:
        st.info(run_view.no_results_words(progress))
        return
    noisy, notes, markers, failed = made(data, "words", lambda: words(data))
    if noisy:
        st.warning(plain(noisy), icon=":material/ssid_chart:")
    on_gpu = run_view.on_gpu(data.run)
    name, cores = data.run.get("name") or run_id, (data.run.get("env") or {}).get("cpu_count")
    width = panel_width(window_width("run_window"))
    spec = made(data, ("linked", percentile, width, name, cores), lambda: charts.linked_charts(
        data.table, data.analysis, slo, percentile=percentile, memory_split=data.split, run=name,
        per_gpu=data.per_gpu, cpu_cores=cores, on_gpu=on_gpu, width=width))
    # its rows inline, not as `datasets` (an Arrow table each, made here and decoded in the browser): the same
    # drawing, lighter to send and to read; the spec with named datasets goes to the report and the PNG
    drawn = made(data, ("linked inline", percentile, width, name, cores), lambda: inline_datasets(spec))
    st.vega_lite_chart(spec=drawn, width="content")
    st.caption("Hover a point in any chart to highlight it in all of them and read its values. Dashed vertical "
               "rules mark the knee markers and the working point; red rules mark out-of-memory batches.")
    for line in notes:
        st.caption(plain(line))
    st.subheader("What the markers say")
    for sentence in markers:
        st.markdown(f"- {plain(sentence)}")
    price = price_control(store, device_type(data.run), on_gpu)
    cost_line = at_working_point(data.table, data.analysis.working_point, price, on_gpu=on_gpu)
    if cost_line:
        st.markdown(f"- {plain(cost_line)}")
    st.subheader("Every point")
    shown, config = made(data, ("points", price), lambda: points_table(data, price))
    st.dataframe(shown, hide_index=True, width="stretch", column_config=config)
    rules = opened("How each point's trust is judged", "trust_rules_open")
    if rules is not None:
        rules.caption("Each metric of a point (throughput, every latency percentile, memory) gets its own verdict: "
                      "its worst check, with the reasons beside the numbers in the table and in each chart's tooltip. "
                      "Checks whose data this run did not record are left out. A point is drawn hollow on the chart "
                      "of a metric whose verdict is untrusted; the working point passes over a point whose throughput "
                      "or SLO latency is untrusted, saying so.")
        rules.dataframe(answers_view.rules_table(), hide_index=True, width="stretch")
    for line in failed:
        st.caption(plain(line))
    csv_col, parquet_col = st.columns(2)  # the files are made when a button is pressed, not on every draw
    csv_col.download_button("Download CSV", lambda: run_view_tables.csv_bytes(data.table), file_name=f"{run_id}.csv",
                            mime="text/csv", icon=":material/download:", on_click="ignore")
    parquet_col.download_button("Download Parquet", lambda: run_view_tables.parquet_bytes(data.table),
                                file_name=f"{run_id}.parquet", mime="application/vnd.apache.parquet",
                                icon=":material/download:", on_click="ignore")
    export_view.run_downloads(data, spec, price)


def words(data: run_view.RunData) -> tuple[str | None, list[str], list[str], list[str]]:
    """The results' sentences: the noise warning, the trust and refinement notes, the markers' sentences and
    one line per point that failed or lost requests."""
    axis = data.analysis.axis
    notes = [line for line in (answers_view.trust_words(data.table, axis),
                               answers_view.refinement_words(data.table, axis)) if line]
    return (run_view.noise_warning(data.run, data.table, axis), notes, run_view.marker_sentences(data.analysis),
            run_view_tables.failures(data.table, axis) + run_view_tables.request_failures(data.table, axis))


def points_table(data: run_view.RunData, price: float | None) -> tuple[pd.DataFrame, dict]:
    """Every point as the table shows it, costed at `price`, and its column configuration."""
    shown = run_view_tables.points_display(with_cost(data.table, price))
    return shown, tables.column_config(shown)


def price_control(store: Store, gpu: str, on_gpu: bool = True) -> float | None:
    """The price per GPU-hour of this run's GPU type (per hour of the machine for a CPU run): a setting kept
    in the history for every run on it."""
    key = f"gpu_hour_price_{gpu}"
    if key not in st.session_state:
        st.session_state[key] = answers_view.stored_price(store, gpu)
    per = f"GPU-hour of {gpu}" if on_gpu else "hour of this CPU machine"
    price = st.number_input(f"Price per {per} (for cost per 1M output tokens)", min_value=0.0,
                            step=0.5, format="%.2f", key=key, placeholder="not set", disabled=bool(store.read_only),
                            help=store.read_only or "Kept per GPU type for every run on it (and for `python -m "
                                 "batchscope report`). Cost per 1M output tokens = price × GPUs ÷ (output tok/s × "
                                 "3600) × 10⁶.")
    if price != answers_view.stored_price(store, gpu):
        answers_view.save_price(store, gpu, price)
    return price


def show_timeline(store: Store, data: run_view.RunData) -> None:
    """One point's steps over time: slots, KV cache and token mix (the story behind its averages)."""
    run_id = data.run["run_id"]
    choices = run_view.timeline_points(data.table, data.analysis.axis) if data.analysis is not None else {}
    if not choices:
        return
    # reading the steps and drawing their chart was a third of a warm Run page's script, and a second chart
    # for the browser to draw, for a box most never open
    box = opened("Inside one point: its steps over time", f"timeline_open_{run_id}")
    if box is None:
        return
    with box:
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
        window = run_view.load_window(store.repeats([run_id]), point, repeat)
        chart = timeline.timeline_chart(steps, *run_view.timeline_limits(data.table, point), window)
        if chart is None:
            st.info("This point's steps recorded no slot, KV cache or token counts.")
            return
        st.altair_chart(chart, width="content")
        st.caption("A continuous point admits requests up to max_num_seqs and while the KV cache has room; a "
                   "static batch keeps its width while its rows finish, so the gap between the two slot lines "
                   "is padding the GPU still computes."
                   + (" The grey band is the load window, from the first token to the last request's arrival: "
                      "its tokens over its length are this repeat's throughput. "
                      + run_view.latency_words(data.run.get("env")) if window else ""))


def show_fingerprint(data: run_view.RunData) -> None:
    box = opened("Environment fingerprint", f"fingerprint_open_{data.run['run_id']}")
    if box is None:
        return
    with box:
        if not data.run.get("env"):
            st.info("The runner has not recorded its environment yet.")
        else:
            st.dataframe(run_view_tables.env_rows(data.run["env"]), hide_index=True, width="stretch")
        if data.run.get("calibration"):
            st.caption("Measured ceilings (calibration)")
            st.json(data.run["calibration"], expanded=False)


def opened(label: str, key: str) -> DeltaGenerator | None:
    """A closed expander whose contents are made only once it is opened (a rerun of the page's fragment), or
    None while it is closed: each box's tables and charts cost the browser time on every load, for boxes
    most never open."""
    box = st.expander(label, expanded=False, key=key, on_change="rerun")
    return box if box.open else None
