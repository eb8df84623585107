"""The app's long-lived objects (one JobManager and its Store per server process) and its error guard."""
from __future__ import annotations

import logging
import threading

import pandas as pd
import streamlit as st

from batchscope.demo import import_demo_runs
from batchscope.analysis import SLO
from batchscope.backends.ray_cluster import ClusterError, GpuType
from batchscope.explain.step import Step
from batchscope.jobs import JobManager
from batchscope.store import Store
from batchscope.store_file import StoreUnavailableError
from batchscope.ui import explain_view, history_view
from batchscope.ui.plain_text import plain
from batchscope.ui.run_cache import RunCache
from batchscope.ui.run_view import RunData

log = logging.getLogger("batchscope.app")


@st.cache_resource(show_spinner=False)
def jobs() -> JobManager:
    """The process-wide job queue (created, left-over runs recovered and, on a fresh history, the
    shipped demo runs imported, on first use; a read-only history is only read)."""
    manager = JobManager.instance()
    if not manager.store.read_only:
        import_demo_runs(manager.store)
    return manager


def cluster_gpus() -> tuple[list[GpuType] | None, str | None]:
    """The Ray cluster's GPU types with how many are free, and why there are none when it does not answer;
    (None, None) for an app without a cluster (no BATCHSCOPE_RAY_ADDRESS)."""
    cluster = jobs().cluster
    if cluster is None:
        return None, None
    try:
        return cluster.gpu_types(), None
    except ClusterError as error:
        return [], str(error)


def store() -> Store:
    """The job manager's Store: one DuckDB connection for every session, the DB's only writer."""
    return jobs().store


@st.cache_resource(show_spinner=False)
def run_cache() -> RunCache:
    """The process-wide cache of analysed runs (see run_cache), shared by every session."""
    return RunCache()


def analyse_ahead(run_id: str | None) -> None:
    """Analyse a run in a background thread, so the page a user most likely opens next finds it ready
    (the first analysis of a large run is most of a cold Run page's wait)."""
    if run_id is None:
        return
    cache, history = run_cache(), store()

    def work() -> None:
        try:
            cache.load(history, run_id, None)
        except Exception:  # only a head start: the page analyses it again and shows any error
            log.exception("analysing run %s ahead of time", run_id)

    threading.Thread(target=work, name=f"analyse-ahead-{run_id}", daemon=True).start()


def load_run(run_id: str, slo: SLO | None) -> RunData | None:
    """A stored run analysed under `slo`, re-analysed only when the store holds something new for it."""
    return run_cache().load(store(), run_id, slo)


def show_unexpected(error: Exception, doing: str) -> None:
    """A failure nobody planned for: logged with its traceback for the operator, one line for the user. A
    history that cannot be used (another BatchScope holds it) is no surprise: its own words, nothing else."""
    if isinstance(error, StoreUnavailableError):
        st.error(plain(error))
        return
    log.exception("unexpected error while %s", doing)
    st.error(f"Something went wrong while {doing}: {type(error).__name__}: {error}. "
             "The details are in the server log.")


def runs_or_stop() -> pd.DataFrame:
    """Every stored run; with none yet, say how to get one and end the page there."""
    runs = store().runs()
    if runs.empty:
        st.info("No runs yet: start one on the New sweep page, or import a run folder on the History page.")
        st.page_link("app_pages/new_sweep.py", label="Start a new sweep", icon=":material/play_arrow:")
        st.stop()
    return runs


def stored_state(runs: pd.DataFrame) -> tuple:
    """What changes when a run gains points, is renamed, ends, or comes and goes: the key of what Explain
    builds from every stored run."""
    stored = runs[["run_id", "name", "state", "points", "points_ok", "finished_at"]].astype(str)
    return tuple(map(tuple, stored.to_numpy()))


def explain_walk(run_id: str, slo: SLO | None, runs: pd.DataFrame) -> list[Step]:
    """Explain's story for a run under `slo`, told once per change of the stored runs: building it (every
    chapter's partner runs, each step's Altair chart) took most of a warm Explain page's time, on every
    rerun, though it only changes with `stored_state`."""
    return _walk(run_id, slo, stored_state(runs), runs)


def explain_default(runs: pd.DataFrame) -> str | None:
    """The run Explain opens with (explain_view.default_run), chosen once per change of the stored runs:
    choosing it analyses every demo run, 0.4 s of each new session's first Explain page."""
    return _default(stored_state(runs), runs)


@st.cache_resource(show_spinner=False, max_entries=4)
def _default(version: tuple, _runs: pd.DataFrame) -> str | None:
    return explain_view.default_run(_runs, lambda rid: load_run(rid, None))


def history_default(runs: pd.DataFrame) -> list[str]:
    """The overlay History offers (history_view.default_overlay), chosen once per change of the stored runs."""
    return _history_default(stored_state(runs), runs)


@st.cache_resource(show_spinner=False, max_entries=4)
def _history_default(version: tuple, _runs: pd.DataFrame) -> list[str]:
    return history_view.default_overlay(_runs, lambda: explain_default(_runs), lambda rid: load_run(rid, None))


@st.cache_resource(show_spinner=False, max_entries=32)
def _walk(run_id: str, slo: SLO | None, version: tuple, _runs: pd.DataFrame) -> list[Step]:
    """The walk itself; Streamlit keys it on run, SLO and `version` (an argument named with `_` is not hashed)."""
    data = load_run(run_id, slo)
    return explain_view.walk(data, _runs, lambda rid: load_run(rid, None),
                             lambda rid: (store().run(rid) or {}).get("spec"), slo)
