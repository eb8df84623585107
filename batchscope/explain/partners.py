"""Which stored runs can stand next to the explained one in a chapter: the same model, dtype and
request lengths (read from each run's spec), differing in exactly the one thing the chapter is about.

No streamlit and no loading here: the caller passes the runs table and a `spec_of(run_id)` reader.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from runners.engines.quant_layout import QUANT_DTYPES

LENGTH_KEYS = ("prompt_len", "output_len")
SpecOf = Callable[[str], dict | None]


def lengths(spec: dict[str, Any] | None) -> dict[str, Any]:
    """The request-length distributions a run drew: two runs with equal ones served the same workload."""
    return {key: (spec or {}).get(key) for key in LENGTH_KEYS}


def gpus(spec: dict[str, Any] | None) -> tuple[int, int]:
    """(tensor_parallel, replicas), 1 when the spec predates them."""
    spec = spec or {}
    return int(spec.get("tensor_parallel") or 1), int(spec.get("replicas") or 1)


def head_quantised(spec: dict[str, Any] | None) -> bool:
    """Whether the run quantised lm_head too (False for a run from before the option)."""
    return bool((spec or {}).get("quantize_lm_head"))


def is_quantised(dtype: str | None) -> bool:
    return dtype in QUANT_DTYPES


def siblings(run: dict[str, Any], runs: pd.DataFrame, spec_of: SpecOf, *, dtype: str | None = None,
             mode: str = "static", layout: tuple[int, int] | None = None) -> list[str]:
    """Other runs of the run's engine and model on the same request lengths with the given dtype and
    (tensor_parallel, replicas) (the run's own by default) and mode, each with a finished point; done runs
    first, then the ones with more ok points."""
    if runs.empty:
        return []
    want = dtype if dtype is not None else run.get("dtype")
    layout = layout if layout is not None else gpus(run.get("spec"))
    same = runs[(runs["run_id"] != run.get("run_id")) & (runs["engine"] == run.get("engine"))
                & (runs["model"] == run.get("model_name")) & (runs["dtype"] == want) & (runs["points_ok"] > 0)]
    own = lengths(run.get("spec"))
    head = head_quantised(run.get("spec")) and want == run.get("dtype")  # another dtype's partner: its plain run
    found = []
    for row in same.to_dict("records"):
        spec = spec_of(str(row["run_id"])) or {}
        if (spec.get("mode", "static") == mode and gpus(spec) == layout and lengths(spec) == own
                and head_quantised(spec) == head):
            found.append(row)
    found.sort(key=lambda row: (row.get("state") == "done", int(row["points_ok"])), reverse=True)
    return [str(row["run_id"]) for row in found]


def continuous_partners(run: dict[str, Any], runs: pd.DataFrame, spec_of: SpecOf) -> list[str]:
    """The continuous-batching runs of the same model, dtype and workload on one GPU."""
    return siblings(run, runs, spec_of, mode="continuous")


def quantised_partners(run: dict[str, Any], runs: pd.DataFrame, spec_of: SpecOf) -> list[str]:
    """For a full-precision run, the best static run per quantised weight dtype on the same workload."""
    if is_quantised(run.get("dtype")):
        return []
    found = [siblings(run, runs, spec_of, dtype=dtype) for dtype in QUANT_DTYPES]
    return [ids[0] for ids in found if ids]


def parallel_partners(run: dict[str, Any], runs: pd.DataFrame, spec_of: SpecOf) -> tuple[str | None, str | None]:
    """For a one-GPU run, the best tensor_parallel=2 and replicas=2 runs of the same model, dtype and workload."""
    if gpus(run.get("spec")) != (1, 1):
        return None, None
    tp = siblings(run, runs, spec_of, layout=(2, 1))
    replicas = siblings(run, runs, spec_of, layout=(1, 2))
    return (tp[0] if tp else None), (replicas[0] if replicas else None)
