"""The one latency-SLO control every page draws: metric, percentile and limit under a key prefix.

Run, New sweep, History and Explain all ask the same question (which latency, at which percentile,
under which limit), so they share these widgets, their defaults and their wording. A page that wants
shareable links keeps the SLO in the URL (`?slo=ttft:95:500`): a link opened, or a hand-over from New
sweep, sets the widgets; a change in the widgets rewrites the link.
"""
from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import NamedTuple

import streamlit as st

from runners.spec.options import SpecError
from runners.spec.slo import PERCENTILES as SLO_PERCENTILES
from runners.spec.slo import SLO, SLO_METRICS, parse_slo
DEFAULT_SLO = SLO("ttft", 95, 500.0)
URL_PARAM = "slo"

# (round limits to offer, the one to start at) for a metric and percentile, or None when the run has no such latency
Span = Callable[[str, int], "tuple[list[float], float] | None"]


class Keys(NamedTuple):
    """The session-state keys of one page's control, each `<prefix>_<field>`; `published` is the URL
    text the control last wrote (a different one came from outside), `refused` whether its limit was bad."""

    prefix: str
    on: str
    metric: str
    percentile: str
    ms: str
    published: str
    refused: str

    @classmethod
    def of(cls, prefix: str) -> Keys:
        return cls(prefix, *(f"{prefix}_{name}" for name in cls._fields[1:]))


def slo_param(value: SLO) -> str:
    """The SLO as a URL query value (`ttft:95:500`), so a shared Run link keeps it."""
    return value.text


def parse_slo_param(text: str | None) -> SLO | None:
    """The SLO in a URL, or None when absent or malformed (a bad link then shows no SLO, not an error)."""
    try:
        return parse_slo(text or "", URL_PARAM)
    except SpecError:
        return None


def state(prefix: str, slo: SLO | None, default: SLO = DEFAULT_SLO) -> dict[str, object]:
    """The widget values, by key, that show `slo` (switched off, at `default`, for None): what another
    page sets to open this one with an SLO."""
    keys, shown = Keys.of(prefix), slo or default
    return {keys.on: slo is not None, keys.metric: shown.metric, keys.percentile: shown.percentile,
            keys.ms: float(shown.ms)}


def start_state(session: MutableMapping, keys: Keys, default: SLO, default_on: bool) -> None:
    """Give every widget its first value once, so none is passed both a value and a session state."""
    for key, value in state(keys.prefix, default if default_on else None, default).items():
        session.setdefault(key, value)


def adopt_url(session: MutableMapping, keys: Keys, url_text: str | None) -> None:
    """Set the widgets from the URL when its SLO is not the one this control last wrote (a link was
    opened, or New sweep handed one over); a URL without an SLO switches it off."""
    if keys.published in session and session[keys.published] == url_text:
        return
    found = parse_slo_param(url_text)
    session.update(state(keys.prefix, found) if found is not None else {keys.on: False})
    session[keys.published] = url_text


def publish(session: MutableMapping, keys: Keys, params: MutableMapping, slo: SLO | None) -> None:
    """Write the SLO in use to the URL (or take it out), remembering what was written."""
    text = slo_param(slo) if slo is not None else None
    session[keys.published] = text
    if text is not None:
        params[URL_PARAM] = text
    elif URL_PARAM in params:
        del params[URL_PARAM]


def slo_control(prefix: str, *, switch: str | None = "Latency SLO", default: SLO = DEFAULT_SLO,
                default_on: bool = False, url: bool = False, span: Span | None = None) -> SLO | None:
    """Draw the control in one row and return the SLO in force, or None.

    `switch` labels the on/off toggle (None: always on). Without `span` the limit is typed in ms; with
    it, a slider over round limits across the run's own latency range for the chosen metric and percentile. An invalid
    limit is said next to the field and gives None (`refused` then tells the page).
    """
    keys = Keys.of(prefix)
    session = st.session_state
    start_state(session, keys, default, default_on)
    if url:
        adopt_url(session, keys, st.query_params.get(URL_PARAM))
    widths = [max(1.2, len(switch) / 24), 1, 1, 1.6] if switch else [1, 1, 3]  # room for a long switch label
    columns = iter(st.columns(widths, vertical_alignment="bottom"))
    on = next(columns).toggle(switch, key=keys.on) if switch else True
    metric = next(columns).selectbox("SLO metric", SLO_METRICS, key=keys.metric, format_func=str.upper)
    percentile = int(next(columns).selectbox("Latency percentile", SLO_PERCENTILES, key=keys.percentile,
                                             format_func=lambda p: f"P{p}"))
    slo, refused = _limit(next(columns), keys, on, metric, percentile, span)
    session[keys.refused] = refused
    if url:
        publish(session, keys, st.query_params, slo)
    return slo


def _limit(column: st.delta_generator.DeltaGenerator, keys: Keys, on: bool, metric: str, percentile: int,
           span: Span | None) -> tuple[SLO | None, bool]:
    """(the SLO, whether an invalid limit refused it) from the limit widget."""
    if span is None:
        limit = column.number_input("SLO limit (ms)", min_value=0.0, step=10.0, key=keys.ms, disabled=not on)
    else:
        found = span(metric, percentile)
        if found is None:
            column.info(f"This run recorded no {metric.upper()} P{percentile}, so no SLO can be set on it.")
            return None, False
        choices, start = found
        # the choices are part of the key: another metric or run starts its own slider at its own start
        limit = column.select_slider("SLO limit (ms) — drag it", options=choices, value=start, format_func=ms_label,
                                     key=f"{keys.ms}_{metric}_{percentile}_{choices[0]:g}_{choices[-1]:g}",
                                     disabled=not on)
    if not on:
        return None, False
    if not limit > 0:  # metric and percentile come from fixed choices: only the limit can be wrong
        column.error("the SLO limit must be a positive number of milliseconds")
        return None, True
    return SLO(metric, percentile, float(limit)), False


def ms_label(ms: float) -> str:
    """A limit as a room reads it: `500 ms`, `2.5 ms` (no trailing zeros)."""
    return f"{ms:.10g} ms"


def refused(prefix: str) -> bool:
    """True when the control is on but its limit is not a valid SLO (it has said why beside the field)."""
    return bool(st.session_state.get(Keys.of(prefix).refused))


def latency_choice(prefix: str) -> tuple[str, int]:
    """The metric and percentile the control shows, which also choose the latency drawn when no SLO is on."""
    keys = Keys.of(prefix)
    return str(st.session_state[keys.metric]), int(st.session_state[keys.percentile])
