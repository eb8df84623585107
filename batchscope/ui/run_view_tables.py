"""The Run page's tables: every finished point with readable headers and units, one line per point that
failed, the downloads and the environment fingerprint."""
from __future__ import annotations

import io
from typing import Any

import pandas as pd

from batchscope.analysis.axis import SweepAxis, sweep_x
from batchscope.analysis.verdicts import latency_words, throughput_words
from batchscope.metric_catalogue import PERCENTILES, columns_stored_as, header, latency_column
from batchscope.ui import tables
from batchscope.units import GiB

# The points table, key columns first (what was run, how it ended, throughput, latency); a metric's header,
# with its unit, comes from the metric catalogue, the other columns' from here.
NOT_METRICS = {"arrival_rate": "arrival req/s", "concurrency": "clients", "max_num_seqs": "max_num_seqs",
               "batch_size": "batch", "status": "status", "added_for": "added by refinement",
               "throughput_verdict": "throughput verdict", "latency_verdict": "latency verdict",
               "goodput_slo": "goodput SLO", "bound": "bound"}
TABLE_ORDER = (
    "arrival_rate", "concurrency", "max_num_seqs", "batch_size", "status", "added_for",
    "output_tokens_per_s", "tokens_per_s_interval", "throughput_verdict", "output_tokens_per_s_min",
    "output_tokens_per_s_max", *(latency_column(key, p) for key in ("ttft", "itl", "e2e", "queue") for p in PERCENTILES),
    "latency_verdict", "goodput_rps", "goodput_slo", "decode_step_ms", "roofline_pct", "bound", "outlier_steps",
    "predicted_tokens_per_s", "predicted_step_ms", "prefill_ms", "requests_per_s", "input_tokens_per_s",
    "mem_peak_allocated", "mem_kv_allocated", "rss_bytes_max", "kv_occupancy_mean", "kv_occupancy_max",
    "admission_waits", "preemptions", "kv_blocks_peak", "kv_blocks_total", "prefill_padding_waste",
    "decode_padding_waste", "gpu_util_pct", "mem_ctrl_util_pct", "sm_util_pct", "tensor_active_pct", "cpu_pct",
    "comm_ms_per_step", "comm_share", "energy_per_output_token_j", "cost_per_mtok", "output_tokens_per_s_per_gpu",
    "setup_ms")
TABLE_COLUMNS = {column: NOT_METRICS.get(column) or header(column) for column in TABLE_ORDER}
ADDED_FOR = {"slo": "SLO bracket", "knee": "knee bracket"}  # runners.spec.refine.REASONS in words
BYTE_COLUMNS = columns_stored_as("bytes")  # shown in GiB
SHARE_COLUMNS = columns_stored_as("fraction")  # 0..1, shown in %


def points_display(table: pd.DataFrame) -> pd.DataFrame:
    """The table of every point that finished, with readable headers and units (sizes in GiB, shares
    in %, each float column at the decimals its size deserves), each verdict beside the numbers it
    concerns (analysis.verdicts) and whether refinement added it, and its cost when `table` went through cost.with_cost. A point that ran out of memory or
    failed has no measurements, so it gets one line under the table (`failures`) instead of a row of
    empty cells. Columns a run never recorded are left out."""
    table = table[table["status"] == "ok"]
    if "trust_metrics" in table:
        table = table.assign(throughput_verdict=table["trust_metrics"].map(throughput_words),
                             latency_verdict=table["trust_metrics"].map(latency_words))
    columns = [c for c in TABLE_COLUMNS if c in table and table[c].notna().any() and c != "status"]
    if "sweep_axis" in table and table["sweep_axis"].notna().all():
        columns.remove("batch_size")  # a continuous point's batch_size repeats its limit or its clients
    if "gpus" not in table or not (table["gpus"] > 1).any():
        columns = [c for c in columns if c != "output_tokens_per_s_per_gpu"]  # one GPU: the same as output tok/s
    shown = table.assign(x=sweep_x(table)).sort_values("x")
    shown = shown.assign(**{c: shown[c] / GiB for c in BYTE_COLUMNS if c in columns},
                         **{c: shown[c] * 100 for c in SHARE_COLUMNS if c in columns})
    shown = shown.assign(**({"added_for": shown["added_for"].map(ADDED_FOR)} if "added_for" in columns else {}))
    rates = {c: float for c in columns if c.endswith(("tokens_per_s", "per_gpu"))}
    shown = tables.rounded(shown[columns].astype(rates))
    return shown.rename(columns=TABLE_COLUMNS).reset_index(drop=True)


SAID_AT_THE_TOP = 2  # failed points the top line names; the rest are counted


def failures(table: pd.DataFrame, axis: SweepAxis) -> list[str]:
    """One line per point that did not finish, in a few words: "batch 256: out of memory: needed 15.98 GiB
    more, 5.17 GiB of 139.80 GiB free" (the full text is in the CSV)."""
    return [f"{axis.at_start(x)}: {why}" for x, why in _failed(table)]


def failed_outcome(table: pd.DataFrame, axis: SweepAxis) -> str | None:
    """How many points of a finished sweep failed and why, in one line for the top of the page: "1 of 8 points
    failed: batch 128, out of memory: needed 23.10 GiB more, …" (the runner's own line quotes PyTorch's whole
    message, five sentences). The first SAID_AT_THE_TOP points only; every one has its line under the table.
    None when every point is ok."""
    found = _failed(table)
    if not found:
        return None
    said = "; ".join(f"{axis.at(x)}, {why}" for x, why in found[:SAID_AT_THE_TOP])
    more = len(found) - SAID_AT_THE_TOP
    return f"{len(found)} of {len(table)} points failed: {said}" + (f"; and {more} more" if more > 0 else "")


def _failed(table: pd.DataFrame) -> list[tuple[float, str]]:
    """Each point that did not finish, along the axis: its place and what happened, in a few words."""
    placed = table.assign(x=sweep_x(table))  # before filtering: an empty frame would adopt the x's index
    failed = placed[placed["status"] != "ok"].sort_values("x")
    return [(row.x, tables.failure_summary(row.status, getattr(row, "error", None))) for row in failed.itertuples()]


def request_failures(table: pd.DataFrame, axis: SweepAxis) -> list[str]:
    """One line per point that finished with some requests failed (an endpoint's refused connections, HTTP
    errors, timeouts, truncated streams): "concurrency 64: 3 of 192 requests failed: HTTP 503 ×3 (...)"."""
    if "error" not in table:
        return []
    placed = table.assign(x=sweep_x(table))
    hit = placed[(placed["status"] == "ok") & placed["error"].notna()].sort_values("x")
    return [f"{axis.at_start(row.x)}: {row.error}" for row in hit.itertuples()]


def csv_bytes(table: pd.DataFrame) -> bytes:
    return table.to_csv(index=False).encode("utf-8")


def parquet_bytes(table: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    table.to_parquet(buffer, index=False)
    return buffer.getvalue()


def env_rows(env: dict[str, Any] | None) -> pd.DataFrame:
    """The environment fingerprint as two text columns, so st.dataframe shows it without type guessing."""
    if not env:
        return pd.DataFrame(columns=["field", "value"])
    return pd.DataFrame({"field": list(env), "value": ["—" if v is None else str(v) for v in env.values()]})
