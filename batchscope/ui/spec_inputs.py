"""A New sweep widget drawn from a spec option's declaration: its label, help, choices and limits come from
SweepSpec (runners.spec.sweep), so the form stops where the runner does and a declared option needs no
widget code of its own. Each widget's key is the option's name (form_state fills it)."""
from __future__ import annotations

from typing import Any

import streamlit as st

from batchscope.ui.form import extra_fields
from batchscope.ui.plain_text import plain
from runners.spec.options import FieldInfo
from runners.spec.sweep import spec_fields

MORE_OPTIONS = "More options"


def info_of(name: str) -> FieldInfo:
    """The declaration of the spec option `name`."""
    return next(info for info in spec_fields() if info.name == name)


def spec_input(container: Any, name: str, info: FieldInfo | None = None, **shown: Any) -> Any:
    """Draw option `name` in `container` by its declared kind and return its value; `shown` passes widget
    settings a page adds (a placeholder)."""
    info = info or info_of(name)
    common = {"label": info.label, "key": info.name, "help": plain(info.help), **shown}
    if info.choices:
        return container.selectbox(options=list(info.choices), **common)
    if info.kind == "bool":
        return container.checkbox(**common)
    if info.kind == "int":
        least = None if info.least is None else int(info.least)
        return int(container.number_input(min_value=least, max_value=int(info.most), step=1, **common))
    if info.kind == "float":
        least = None if info.least is None else float(info.least)
        return float(container.number_input(min_value=least, max_value=float(info.most), **common))
    if info.kind == "list[int]":
        return container.text_input(**common)
    return container.text_input(max_chars=info.longest, **common)


def other_inputs(mode: str, drawn: set[str]) -> dict[str, Any]:
    """Every option the page lays out nowhere else (extra_fields) that `mode` reads, under one expander (a
    message about one of them shows outside it, where a collapsed expander cannot hide it)."""
    values = {}
    left = [info for info in extra_fields() if info.applies_to(mode) and info.name not in drawn]
    if left:
        with st.expander(MORE_OPTIONS):
            for info in left:
                values[info.name] = spec_input(st, info.name, info)
    return values
