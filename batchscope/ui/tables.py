"""Readable numbers in the app's tables: as many decimals as a column's size deserves, sizes in GiB,
shares in %, and why a point failed in a few words rather than a cut-off traceback."""
from __future__ import annotations

import re
from typing import Any

import pandas as pd
import streamlit as st

SUMMARY_CHARS = 90
_CUDA_OOM = re.compile(r"Tried to allocate ([\d.]+ [KMG]iB).*?total capacity of ([\d.]+ [KMG]iB) of which "
                       r"([\d.]+ [KMG]iB) is free", re.S)


def decimals(values: pd.Series) -> int:
    """0 decimals for values in the hundreds and up, 1 for tens, 2 for units, 3 below (by the median size)."""
    size = values.dropna().abs().median() if values.notna().any() else 0.0
    return 0 if size >= 100 else 1 if size >= 10 else 2 if size >= 1 else 3


def rounded(frame: pd.DataFrame) -> pd.DataFrame:
    """Every float column rounded to its `decimals`, so a CSV of what is shown reads like the screen."""
    return frame.assign(**{c: frame[c].round(decimals(frame[c])) for c in frame.select_dtypes("float").columns})


def column_config(frame: pd.DataFrame) -> dict[str, Any]:
    """st.dataframe's column settings: each float column printed with its `decimals`."""
    return {c: st.column_config.NumberColumn(format=f"%.{decimals(frame[c])}f")
            for c in frame.select_dtypes("float").columns}


def failure_summary(status: str | None, error: object) -> str:
    """What happened at a point that did not finish, in one short line ("" for an ok point): a CUDA
    out-of-memory error becomes "out of memory: needed 15.98 GiB more, 5.17 GiB of 139.80 GiB free"."""
    if status == "ok" or status is None:
        return ""
    text = error if isinstance(error, str) else ""
    found = _CUDA_OOM.search(text)
    if found:
        return f"out of memory: needed {found[1]} more, {found[3]} of {found[2]} free"
    if status == "oom":
        return "out of memory" + (f": {_first_sentence(text)}" if text else "")
    return _first_sentence(text) or status


def _first_sentence(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    sentence = line.split(". ")[0]
    return sentence if len(sentence) <= SUMMARY_CHARS else sentence[:SUMMARY_CHARS - 1] + "…"
