"""History: every run with its fingerprint; filter, overlay several on the same charts, rename, delete, import."""
from __future__ import annotations

from datetime import date

import pandas as pd
import streamlit as st

from batchscope.analysis import SLO
from batchscope.team import actions
from batchscope.ui import (history_manage, history_sections, history_view, overlay_url, resources, tables,
                           team_view)
from batchscope.ui.plain_text import plain
from batchscope.ui.slo_control import Keys, latency_choice, slo_control

st.title("History")
store = resources.store()
all_runs = store.runs()
user = team_view.user()


def show_import() -> None:
    """Import a run folder made elsewhere (another machine, an older checkout); tuners and admins."""
    if not actions.may_launch(user):
        return
    with st.expander("Import a run folder", expanded=all_runs.empty):
        path = st.text_input("Run folder path", key="import_path",
                             placeholder="/data/runs/20250101-120000-llama-3.1-8b (holds spec.json, status.json)")
        if st.button("Import", key="import_button", icon=":material/upload:", disabled=bool(store.read_only),
                     help=store.read_only):
            result = actions.import_run(store, user, path)
            if result.error:
                st.error(plain(result.error))
            else:
                st.success(plain(f"Imported {result.run_id}: {result.points_added} new point(s)."))
                for warning in result.warnings:
                    st.warning(plain(warning))


if all_runs.empty:
    st.info("No runs stored yet: start a sweep on the New sweep page or import a run folder below.")
    show_import()
    st.stop()

choices = history_view.filter_choices(all_runs)
filter_cols = st.columns(len(history_view.FILTER_COLUMNS) + 1)
chosen: dict[str, list[str]] = {}
for column, (field, label) in zip(filter_cols, history_view.FILTER_COLUMNS.items()):
    chosen[field] = column.multiselect(label, choices.get(field, []), key=f"filter_{field}", placeholder="any")
first_day = all_runs["created_at"].dropna().min()
default_range = (first_day.date(), date.today()) if pd.notna(first_day) else ()
days = filter_cols[-1].date_input("Created between", value=default_range, key="filter_dates")
since, until = (days[0], days[1]) if isinstance(days, tuple) and len(days) == 2 else (None, None)
mine = st.checkbox(f"Only mine ({user.identity})", key="filter_mine")
runs = store.runs(**{field: values or None for field, values in chosen.items()}, since=since, until=until,
                  owner=user.identity if mine else None)
st.caption(f"{len(runs)} of {len(all_runs)} runs match.")
shown_runs = history_view.runs_display(runs)
st.dataframe(shown_runs, hide_index=True, width="stretch", column_config=tables.column_config(shown_runs))

st.subheader("Compare runs")
labels_all = history_view.overlay_labels(runs, runs["run_id"].tolist())
slo_keys = Keys.of("history_slo")
overlay_url.restore(st.session_state, st.query_params, slo_keys.published)
overlay_url.adopt(st.session_state, st.query_params, list(labels_all), "overlay_runs", slo_keys.metric,
                  slo_keys.percentile)
picked = st.multiselect("Runs to overlay (one colour each; click the legend to single one out)",
                        list(labels_all), format_func=labels_all.get, key="overlay_runs",
                        max_selections=history_view.MAX_OVERLAY)
slo = slo_control("history_slo", default=SLO("itl", 95, 50.0), url=True)
metric, percentile = latency_choice("history_slo")
overlay_url.publish(st.session_state, st.query_params, picked, metric, percentile)
if picked:
    problem = history_view.overlay_problem(picked)
    overlay = {} if problem else history_view.overlay_runs({rid: labels_all[rid] for rid in picked},
                                                           lambda run_id: resources.load_run(run_id, slo))
    problem = problem or history_view.axis_problem(overlay)
    if problem:
        st.warning(plain(problem))
    elif not overlay:
        st.info("None of the chosen runs has finished points yet.")
    else:
        history_sections.show_overlay(store, picked, overlay, slo, percentile, metric)
else:
    history_sections.offer_overlay(resources.history_default(all_runs), labels_all, "overlay_runs")

history_sections.show_regressions(store, all_runs, runs, slo)

st.subheader("Manage a run")
managed = [rid for rid, owner in zip(all_runs["run_id"], all_runs["owner"]) if actions.may_manage(user, owner)]
if not managed:  # the actions below check again on the server: hiding them is only a courtesy
    st.caption("Runs can be renamed or deleted by their owner or an admin; none of these is yours.")
    show_import()
    st.stop()
labels_every = history_view.overlay_labels(all_runs, managed)
target = st.selectbox("Run", list(labels_every), format_func=lambda rid: f"{labels_every[rid]} — {rid}",
                      key="manage_run")
history_manage.show_manage(store, user, target, labels_every[target])
show_import()
