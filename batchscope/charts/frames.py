"""The long data frames the charts draw, one per panel, built in pandas (testable without a browser):
x is the run's sweep axis (`analysis.axis.sweep_x`), each row a series' value with its unit already
written out for the tooltip. Names and units come from the metric catalogue."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from batchscope.analysis.axis import AXES, axes_of, sweep_x
from batchscope.analysis.marker import num
from batchscope.analysis.verdicts import THROUGHPUT
from batchscope.metric_catalogue import LATENCY_NAMES, PANEL_UNITS, PERCENTILES, label, latency_column
from batchscope.units import GiB, value_text

LATENCY_METRICS = {key: LATENCY_NAMES[key] for key in ("ttft", "itl", "e2e")}
QUEUE_SERIES = "queue wait (in TTFT)"
UTILISATION_COLUMNS = {column: label(column) for column in (
    "gpu_util_pct", "mem_ctrl_util_pct", "sm_util_pct", "tensor_active_pct", "dram_bw_util_pct", "cpu_pct")}
COMM_SERIES = label("comm_share")
MEMORY_PARTS = {"weights": label("mem_weights"), "kv_used": label("mem_kv_used"),
                "kv_unused": "KV cache (allocated, unused)", "activations": label("mem_activations"),
                "allocator_reserve": label("mem_allocator_reserve"), "other": label("mem_other"),
                "nvml_used": label("mem_nvml_used")}
ROOFLINE_SERIES = label("predicted_tokens_per_s")
ROOFLINE_STEP_SERIES = label("predicted_step_ms")
MARKER_ATTRIBUTES = (("plateau", "plateau"), ("kneedle", "kneedle"), ("slo_limit", "SLO limit"),
                     ("working_point", "working point"))
EMPTY_LONG = ["run", "x", "series", "value", "shown"]
TRADEOFF_COLUMNS = ["run", "x", "speed", "value", "shown", "speed_shown"]


def axis_values(*tables: pd.DataFrame) -> list[float]:
    """Every x any points table holds: the tick values of the shared axis."""
    values: set[float] = set()
    for table in tables:
        if "batch_size" in table:
            values.update(float(x) for x in sweep_x(table).dropna())
    return sorted(values)


def axis_title(*tables: pd.DataFrame) -> str:
    """What the x axis holds: batch size for static points, the swept setting of a continuous run
    (max_num_seqs, concurrency, arrival rate), each named when runs of several kinds are overlaid."""
    found = [axis for table in tables for axis in axes_of(table)]
    titles = [axis.title for key, axis in AXES.items() if axis in found] or [AXES["batch_size"].title]
    if len(titles) == 1:
        return titles[0]
    return " · ".join(t.removesuffix(" (log2)") for t in titles) + " (log2)"


def throughput_frame(table: pd.DataFrame, run: str = "") -> pd.DataFrame:
    """Long frame: measured output tokens/s with its min–max repeat band, and the roofline prediction."""
    rows = []
    ok = ok_points(table)
    if "output_tokens_per_s" in ok:
        lo = ok.get("output_tokens_per_s_min", ok["output_tokens_per_s"]).fillna(ok["output_tokens_per_s"])
        hi = ok.get("output_tokens_per_s_max", ok["output_tokens_per_s"]).fillna(ok["output_tokens_per_s"])
        rows.append(pd.DataFrame({
            "x": ok["x"], "series": "measured", "value": ok["output_tokens_per_s"], "lo": lo, "hi": hi,
            "note": [f"{_band(point)} {num(a)}–{num(b)} tok/s{_trust_note(point, THROUGHPUT)}"
                     for a, b, (_, point) in zip(lo, hi, ok.iterrows())],
            **_point_kind(ok, THROUGHPUT)}))
    if "predicted_tokens_per_s" in ok:
        reached = ok.get("roofline_pct", pd.Series(float("nan"), index=ok.index))
        rows.append(pd.DataFrame({"x": ok["x"], "series": ROOFLINE_SERIES,
                                  "value": ok["predicted_tokens_per_s"],
                                  "note": [f"an ideal engine; the measured step reaches {num(p)} % of it" if pd.notna(p)
                                           else "an ideal engine" for p in reached]}))
    return _finish(rows, run, PANEL_UNITS["throughput"])


def latency_frame(table: pd.DataFrame, percentile: int = 95, run: str = "",
                  metrics: tuple[str, ...] = tuple(LATENCY_METRICS)) -> pd.DataFrame:
    """Long frame: TTFT/ITL/E2E at one percentile, plus the roofline-predicted decode step.

    The prediction is a decode step time, so it is comparable with ITL only; it is drawn when ITL is.
    With TTFT, an online-serving run also gets its queue wait (arrival → admission, part of its TTFT);
    a zero wait has no place on the log axis and is left out.
    """
    if percentile not in PERCENTILES:
        raise ValueError(f"percentile must be one of {PERCENTILES}, got {percentile}")
    ok = ok_points(table)
    rows = []
    for metric in metrics:
        column = latency_column(metric, percentile)
        if column in ok:
            rows.append(pd.DataFrame({"x": ok["x"],
                                      "series": label(column),
                                      "value": ok[column], **_point_kind(ok, f"{metric}_p{percentile}"),
                                      "note": [_trust_note(point, f"{metric}_p{percentile}").removeprefix("; ")
                                               for _, point in ok.iterrows()]}))
    queue = latency_column("queue", percentile)
    if "ttft" in metrics and queue in ok and ok[queue].notna().any():
        rows.append(pd.DataFrame({"x": ok["x"], "series": f"{QUEUE_SERIES} P{percentile}", "value": ok[queue],
                                  "note": [_trust_note(point, f"queue_p{percentile}").removeprefix("; ")
                                           for _, point in ok.iterrows()]}))
    if "itl" in metrics and "predicted_step_ms" in ok:
        rows.append(pd.DataFrame({"x": ok["x"], "series": ROOFLINE_STEP_SERIES,
                                  "value": ok["predicted_step_ms"], "note": "a decode step at the roofline"}))
    frame = _finish(rows, run, PANEL_UNITS["latency"])
    return frame[frame["value"] > 0]


def _point_kind(ok: pd.DataFrame, metric: str) -> dict[str, pd.Series]:
    """How a measured point is drawn: hollow when the verdict on this metric (analysis.verdicts) is
    untrusted, a diamond when refinement added it; empty for tables without those columns."""
    kind = {}
    if f"trust_{metric}" in ok:
        kind["trust"] = ok[f"trust_{metric}"]
    if "added_for" in ok:
        kind["added"] = ok["added_for"].notna()
    return kind


def _band(point: pd.Series) -> str:
    """What the shaded band is: the 95 % interval of a point measured until known, else its repeats' range."""
    return "95 % interval" if pd.notna(point.get("tokens_per_s_interval", float("nan"))) else "repeats"


def _trust_note(point: pd.Series, metric: str) -> str:
    """The tooltip's word on this metric's verdict and on refinement: "; caution: Throughput 512 tok/s ± 7 % …"."""
    added = point.get("added_for")
    text = f"; added by refinement ({added} bracket)" if isinstance(added, str) else ""
    verdicts = point.get("trust_metrics")
    verdict = verdicts.get(metric) if isinstance(verdicts, dict) else None
    if verdict is not None:
        text += f"; {verdict['level']}: {' '.join(verdict['reasons'])}"
    return text


def utilisation_frame(table: pd.DataFrame, run: str = "", columns: Mapping[str, str] | None = None,
                      per_gpu: pd.DataFrame | None = None, cpu_cores: int | None = None) -> pd.DataFrame:
    """Long frame of every utilisation metric the run recorded (absent sources are left out), and with
    tensor parallelism the all-reduce's share of the decode step in %, the time no GPU computes.
    Process CPU % counts 100 per busy core; given the `cpu_cores` the run had (env.json's cpu_count) it is
    drawn as a share of them, so every line of the panel lies on 0–100 %.

    `per_gpu` (Store.gpu_utilisation) holding two or more GPUs replaces the GPU util averaged over
    them with one line per GPU: a replica that finishes its share early shows as its GPU idling."""
    ok = ok_points(table)
    gpus = _per_gpu_rows(ok, per_gpu)
    rows = [pd.DataFrame({"x": ok["x"], "series": label, "value": ok[column]})
            if column != "cpu_pct" or not cpu_cores else
            pd.DataFrame({"x": ok["x"], "series": cpu_label(cpu_cores), "value": ok[column] / cpu_cores})
            for column, label in (columns or UTILISATION_COLUMNS).items()
            if column in ok and ok[column].notna().any() and not (column == "gpu_util_pct" and gpus)] + gpus
    if columns is None and "comm_share" in ok and ok["comm_share"].notna().any():
        rows.append(pd.DataFrame({"x": ok["x"], "series": COMM_SERIES, "value": 100.0 * ok["comm_share"]}))
    return _finish(rows, run, PANEL_UNITS["utilisation"])


def cpu_label(cores: int) -> str:
    """The process CPU line as a share of the cores the run had: `process CPU (% of 2 cores)`."""
    return f"process CPU (% of {cores} core{'s' if cores != 1 else ''})"


def _per_gpu_rows(ok: pd.DataFrame, per_gpu: pd.DataFrame | None) -> list[pd.DataFrame]:
    """One (x, series, value) frame per GPU when the run sampled more than one; [] otherwise."""
    if per_gpu is None or per_gpu["gpu_index"].nunique() < 2 or "point_index" not in ok:
        return []
    found = per_gpu.merge(ok[["point_index", "x"]], on="point_index")
    return [pd.DataFrame({"x": rows["x"], "series": f"{UTILISATION_COLUMNS['gpu_util_pct']}, GPU {gpu}",
                          "value": rows["gpu_util_pct"]}) for gpu, rows in found.groupby("gpu_index")]


def primary_utilisation(table: pd.DataFrame) -> dict[str, str]:
    """The one utilisation metric an overlay shows per run: GPU util when recorded, else process CPU %."""
    for column in ("gpu_util_pct", "cpu_pct"):
        if column in table and table[column].notna().any():
            return {column: UTILISATION_COLUMNS[column]}
    return {}


def memory_frame(split: pd.DataFrame, run: str = "") -> pd.DataFrame:
    """The memory split (x, part, bytes) in GiB with readable part names, in stacking order; each row's
    note is the stack's total at its x."""
    frame = split.dropna(subset=["bytes"])
    parts = frame["part"].astype(str)
    frame = pd.DataFrame({"x": frame["x"], "series": parts.map(MEMORY_PARTS).fillna(parts),
                          "value": frame["bytes"] / GiB,
                          "order": parts.map({p: i for i, p in enumerate(MEMORY_PARTS)}).fillna(len(MEMORY_PARTS))})
    totals = frame.groupby("x")["value"].transform("sum")
    frame["note"] = [f"{value_text(t, 'GiB')} in all at this point" for t in totals]
    return _finish([frame], run, PANEL_UNITS["memory"])


CPU_MEMORY_NOTE = "on a CPU, activations are not told apart from the process's other memory, so none is drawn"


def measured_parts(split: pd.DataFrame, on_gpu: bool) -> pd.DataFrame:
    """The memory split's parts that were measured as what they are named. On a CPU the runner has no
    allocator peak: "activations" there is the resident memory's growth beyond the KV cache (allocator
    retention, the interpreter), so a CPU run's split keeps only weights and KV cache."""
    return split if on_gpu or "part" not in split else split[split["part"].astype(str) != "activations"]


def memory_total_frame(table: pd.DataFrame, split: pd.DataFrame, run: str = "") -> pd.DataFrame:
    """One line per run for overlays: the sum of the memory split at each x, in GiB."""
    totals = split.dropna(subset=["bytes"]).groupby("x", as_index=False)["bytes"].sum()
    frame = pd.DataFrame({"x": totals["x"], "series": "memory used",
                          "value": totals["bytes"] / GiB})
    return _finish([frame], run, PANEL_UNITS["memory"])


def tradeoff_frame(table: pd.DataFrame, run: str = "") -> pd.DataFrame:
    """Throughput against the output speed one user sees (1000 / median ITL, tokens/s per user), one
    row per ok point: the trade-off serving benchmarks report. `x` stays the sweep value, so the shared
    hover still selects by batch."""
    ok = ok_points(table)
    if not {"output_tokens_per_s", "itl_ms_p50"} <= set(ok.columns):
        return pd.DataFrame(columns=["run", "x", "speed", "value", "shown", "speed_shown"])
    ok = ok[(ok["itl_ms_p50"] > 0) & ok["output_tokens_per_s"].notna()]
    speed = 1000.0 / ok["itl_ms_p50"].astype(float)
    frame = pd.DataFrame({"run": run, "x": ok["x"].astype(float), "speed": speed,
                          "value": ok["output_tokens_per_s"].astype(float)})
    frame["shown"] = [value_text(v, "tok/s") for v in frame["value"]]
    frame["speed_shown"] = [f"{num(v)} tok/s per user" for v in frame["speed"]]
    return frame.reset_index(drop=True)


def capacity_frame(table: pd.DataFrame, run: str = "") -> pd.DataFrame:
    """The device capacity (GiB) recorded with the run, one row, or empty when unknown."""
    if "mem_capacity" not in table or table["mem_capacity"].dropna().empty:
        return pd.DataFrame(columns=["run", "value", "label"])
    capacity = float(table["mem_capacity"].dropna().max()) / GiB
    label = f"capacity {capacity:,.1f} GiB" + (f" ({run})" if run else "")
    return pd.DataFrame({"run": [run], "value": [capacity], "label": [label]})


def marker_frame(analysis: Any, table: pd.DataFrame, run: str = "",
                 kinds: tuple[str, ...] = ("plateau", "kneedle", "SLO limit", "working point", "OOM")
                 ) -> pd.DataFrame:
    """Vertical rules: the knee markers and working point of an analysis, and every OOM point.

    Markers at the same x share one rule whose label names them all, so labels never overprint; the
    run is a column, not part of the label (an overlay's labels stay short, its tooltips name the run).
    """
    rows = []
    for attribute, kind in MARKER_ATTRIBUTES:
        marker = getattr(analysis, attribute, None) if analysis is not None else None
        if marker is not None and kind in kinds:
            rows.append({"x": float(marker.x), "kind": kind, "label": marker.label or kind})
    if "OOM" in kinds and "status" in table:
        for x in sweep_x(table)[table["status"] == "oom"]:
            rows.append({"x": float(x), "kind": "OOM", "label": "OOM"})
    if not rows:
        return pd.DataFrame(columns=["run", "x", "kind", "label"])
    frame = pd.DataFrame(rows)
    frame = frame.groupby("x", as_index=False, sort=True).agg(
        kind=("kind", "first"), label=("label", lambda labels: " · ".join(dict.fromkeys(labels))))
    frame.insert(0, "run", run)
    return frame


def ok_points(table: pd.DataFrame) -> pd.DataFrame:
    ok = table[table["status"] == "ok"] if "status" in table else table
    return ok.assign(x=sweep_x(ok)).sort_values("x")


def _finish(rows: list[pd.DataFrame], run: str, unit: str) -> pd.DataFrame:
    frame = concat(rows, ["x", "series", "value"])
    frame = frame.dropna(subset=["value"])
    frame.insert(0, "run", run)
    frame["x"] = frame["x"].astype(float)
    frame["value"] = frame["value"].astype(float)
    frame["shown"] = [value_text(v, unit) for v in frame["value"]]
    return frame.reset_index(drop=True)


def concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    found = [f for f in frames if not f.empty]
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=columns)
