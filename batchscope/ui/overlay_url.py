"""History's overlay in the URL (runs, latency metric; the SLO by slo_control's own `slo` parameter), so a
link shares it, a reload keeps it, and coming back from another page (which leaves no query string)
restores it from the session."""
from __future__ import annotations

from collections.abc import MutableMapping

from batchscope.ui.slo_control import URL_PARAM as SLO_PARAM

RUNS, LATENCY = "runs", "latency"
SAVED = "history_overlay_url"  # the parameters last published, kept across pages (not a widget key)
SEEN = "history_overlay_seen"  # the URL text each widget last took, so the URL is adopted once


def restore(session: MutableMapping, params: MutableMapping, slo_published: str) -> None:
    """A URL with no overlay on a session that had one (back from another page, which dropped the widgets'
    state): put it back in the URL, for the widgets to take again (the SLO control's too: `slo_published`
    is its key for the URL text it last took)."""
    if not any(params.get(key) for key in (RUNS, LATENCY, SLO_PARAM)) and session.get(SAVED):
        for key, value in session[SAVED].items():
            params[key] = value
        session[SEEN] = {}
        session.pop(slo_published, None)


def adopt(session: MutableMapping, params: MutableMapping, options: list[str], runs_key: str,
          metric_key: str, percentile_key: str) -> None:
    """Set the widgets from the URL where it says something they did not write: only runs among `options`
    (a link to a deleted or filtered-out run selects nothing in its place), and a known metric:percentile."""
    seen = session.setdefault(SEEN, {})
    runs = params.get(RUNS)
    if runs is not None and seen.get(RUNS) != runs:
        session[runs_key] = [run for run in runs.split(",") if run in options]
        seen[RUNS] = runs
    latency = params.get(LATENCY)
    if latency is not None and seen.get(LATENCY) != latency:
        metric, _, percentile = latency.partition(":")
        if metric in ("ttft", "itl", "e2e") and percentile in ("50", "95", "99"):
            session[metric_key], session[percentile_key] = metric, int(percentile)
        seen[LATENCY] = latency


def publish(session: MutableMapping, params: MutableMapping, picked: list[str], metric: str, percentile: int) -> None:
    """Write the overlay in use to the URL and remember it for a return from another page."""
    seen = session.setdefault(SEEN, {})
    if picked:
        params[RUNS] = seen[RUNS] = ",".join(picked)
    else:
        params.pop(RUNS, None)
        seen[RUNS] = None
    params[LATENCY] = seen[LATENCY] = f"{metric}:{percentile}"
    session[SAVED] = {key: params[key] for key in (RUNS, LATENCY, SLO_PARAM) if params.get(key)}
