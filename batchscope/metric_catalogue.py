"""Every measured metric the app shows, once: its points-table column, its name in words, the unit it is
shown in, which way is better, and its table header. Charts, tables, the report and the trust verdicts
read names, units and directions here, so "TTFT P95" or "tok/s" is never spelled twice.

A byte column is shown in GiB and a 0..1 share in %: `stored` says which conversion a table applies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher", "lower", "neither"]
Stored = Literal["as shown", "bytes", "fraction"]

PERCENTILES = (50, 95, 99)
# The latency metrics a point records at each percentile: key → its short name in words (a table header
# says "queue P95 ms", a sentence "P95 queue wait").
LATENCY_NAMES = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E", "queue": "queue wait"}


@dataclass(frozen=True)
class Metric:
    """One column of a point's summary as a reader meets it."""

    column: str
    label: str  # in words, as a chart's series or a sentence names it
    unit: str  # as shown: "tok/s", "ms", "%", "GiB", "req/s", "J", "" for a count
    direction: Direction
    header: str  # the table column's header, unit included
    stored: Stored = "as shown"


def _latency(key: str, p: int) -> Metric:
    short = LATENCY_NAMES[key].removesuffix(" wait")
    return Metric(latency_column(key, p), f"{LATENCY_NAMES[key]} P{p}", "ms", "lower", f"{short} P{p} ms")


def latency_column(key: str, percentile: int) -> str:
    """`ttft_ms_p95`: the summary column of one latency metric at one percentile."""
    return f"{key}_ms_p{percentile}"


_METRICS = (
    Metric("output_tokens_per_s", "output tokens/s", "tok/s", "higher", "output tok/s"),
    Metric("tokens_per_s_interval", "throughput 95 % interval", "%", "lower", "± % (95 % interval)", "fraction"),
    Metric("output_tokens_per_s_min", "output tokens/s, slowest repeat", "tok/s", "higher", "tok/s min"),
    Metric("output_tokens_per_s_max", "output tokens/s, fastest repeat", "tok/s", "higher", "tok/s max"),
    *(_latency(key, p) for key in LATENCY_NAMES for p in PERCENTILES),
    Metric("goodput_rps", "goodput", "req/s", "higher", "goodput req/s"),
    Metric("decode_step_ms", "decode step", "ms", "lower", "decode step ms"),
    Metric("roofline_pct", "share of the roofline", "%", "higher", "% of roofline"),
    Metric("outlier_steps", "outlier steps (> 5× like steps)", "", "lower", "outlier steps (> 5× like steps)"),
    Metric("predicted_tokens_per_s", "roofline prediction", "tok/s", "higher", "roofline tok/s"),
    Metric("predicted_step_ms", "roofline decode step", "ms", "lower", "roofline step ms"),
    Metric("prefill_ms", "prefill", "ms", "lower", "prefill ms"),
    Metric("requests_per_s", "requests/s", "req/s", "higher", "requests/s"),
    Metric("input_tokens_per_s", "input tokens/s", "tok/s", "higher", "input tok/s"),
    Metric("mem_peak_allocated", "peak allocated memory", "GiB", "lower", "peak alloc GiB", "bytes"),
    Metric("mem_kv_allocated", "KV cache allocated", "GiB", "lower", "KV alloc GiB", "bytes"),
    Metric("mem_weights", "weights", "GiB", "lower", "weights GiB", "bytes"),
    Metric("mem_kv_used", "KV cache (used)", "GiB", "lower", "KV used GiB", "bytes"),
    Metric("mem_activations", "activations + workspace", "GiB", "lower", "activations GiB", "bytes"),
    Metric("mem_allocator_reserve", "allocator reserve", "GiB", "lower", "allocator reserve GiB", "bytes"),
    Metric("mem_other", "CUDA context + other", "GiB", "lower", "other GiB", "bytes"),
    Metric("mem_nvml_used", "memory in use (NVML)", "GiB", "lower", "NVML used GiB", "bytes"),
    Metric("mem_capacity", "device capacity", "GiB", "neither", "capacity GiB", "bytes"),
    Metric("rss_bytes_max", "peak resident memory", "GiB", "lower", "peak RSS GiB", "bytes"),
    Metric("kv_occupancy_mean", "KV occupancy, mean", "%", "neither", "KV occupancy mean %", "fraction"),
    Metric("kv_occupancy_max", "KV occupancy, max", "%", "neither", "KV occupancy max %", "fraction"),
    Metric("admission_waits", "admission waits (KV pool full)", "", "lower", "admission waits (KV pool full)"),
    Metric("preemptions", "preemptions (recomputed)", "", "lower", "preemptions (recomputed)"),
    Metric("kv_blocks_peak", "KV blocks at peak", "", "neither", "KV blocks peak"),
    Metric("kv_blocks_total", "KV blocks in the pool", "", "neither", "KV blocks in pool"),
    Metric("prefill_padding_waste", "prefill padding", "%", "lower", "prefill padding %", "fraction"),
    Metric("decode_padding_waste", "decode padding", "%", "lower", "decode padding %", "fraction"),
    Metric("gpu_util_pct", "GPU util (NVML)", "%", "higher", "GPU util %"),
    Metric("mem_ctrl_util_pct", "memory-controller util (NVML)", "%", "higher", "mem-ctrl util %"),
    Metric("sm_util_pct", "SM util (GPM)", "%", "higher", "SM util %"),
    Metric("tensor_active_pct", "tensor active (GPM)", "%", "higher", "tensor active %"),
    Metric("dram_bw_util_pct", "DRAM bandwidth util (GPM)", "%", "higher", "DRAM bandwidth util %"),
    Metric("cpu_pct", "process CPU % (100 = one core)", "%", "neither", "CPU % (100 = one core)"),
    Metric("comm_ms_per_step", "all-reduce per decode step", "ms", "lower", "all-reduce ms / step"),
    Metric("comm_share", "all-reduce share of decode step (tensor parallel)", "%", "lower", "all-reduce share %",
           "fraction"),
    Metric("energy_per_output_token_j", "energy per output token", "J", "lower", "J / output token"),
    Metric("cost_per_mtok", "cost per 1M output tokens", "", "lower", "cost / 1M output tokens"),
    Metric("output_tokens_per_s_per_gpu", "output tokens/s per GPU", "tok/s", "higher", "output tok/s per GPU"),
    Metric("setup_ms", "setup", "ms", "lower", "setup ms"),
)
METRICS: dict[str, Metric] = {metric.column: metric for metric in _METRICS}
# What each Run-page panel draws, by the unit of its main metric.
PANEL_UNITS = {"throughput": METRICS["output_tokens_per_s"].unit, "latency": METRICS["ttft_ms_p95"].unit,
               "utilisation": METRICS["gpu_util_pct"].unit, "memory": METRICS["mem_peak_allocated"].unit}


def label(column: str) -> str:
    """The metric's name in words (`GPU util (NVML)`); KeyError for a column that is not a metric."""
    return METRICS[column].label


def header(column: str) -> str:
    """The table header of a metric's column (`TTFT P95 ms`)."""
    return METRICS[column].header


def columns_stored_as(stored: Stored) -> tuple[str, ...]:
    """The metric columns a table converts the same way: "bytes" (shown in GiB), "fraction" (shown in %)."""
    return tuple(column for column, metric in METRICS.items() if metric.stored == stored)
