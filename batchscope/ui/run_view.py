"""The Run page's logic: which run opens, progress and ETA wording, the workload, noise and marker words,
the timeline's choices, and loading a run (its tables are in `run_view_tables`)."""
from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field, fields
from typing import Any

import pandas as pd

from batchscope.analysis import SLO, Analysis, analyse, memory_split
from batchscope.analysis.axis import AXES, SweepAxis, sweep_x
from batchscope.analysis.marker import pct
from batchscope.analysis.noise import describe_spread
from batchscope.analysis.trust import NOISY_SPREAD
from batchscope.backends.ray_cluster import ranks
from batchscope.store import Store
from runners.spec import SweepSpec, points
from runners.spec.registry import is_load_driven, measures_a_server

LIVE_STATES = frozenset({"queued", "running"})
MIN_CURVE_POINTS = 3  # fewer ok points show no knee: a run worth opening first has at least this many


def informative_run(runs: pd.DataFrame) -> str | None:
    """The run a plain Run page (and Home's link) opens: one still queued or running, which the user is
    likely watching; else the newest finished run with a curve to read; else the run with the most ok
    points. `runs` is Store.runs(), newest first; a one-point cancelled run is never preferred."""
    if runs.empty:
        return None
    live = runs[runs["state"].isin(LIVE_STATES)]
    if not live.empty:
        return str(live.iloc[0]["run_id"])
    full = runs[(runs["state"] == "done") & (runs["points_ok"] >= MIN_CURVE_POINTS)]
    if not full.empty:
        return str(full.iloc[0]["run_id"])
    return str(runs.loc[runs["points_ok"].idxmax(), "run_id"])


def pick_run(run_ids: list[str], url_run: str | None, selected: str | None, default: str) -> tuple[str, str | None]:
    """(the run to show, an error for a link to an unknown run): the link's run, else the one picked
    before on this page, else `default`."""
    if url_run and url_run not in run_ids:
        fallback = selected if selected in run_ids else default
        return fallback, f"There is no run with id {url_run!r} in this history. Showing another run instead."
    return url_run or (selected if selected in run_ids else default), None


def is_live(progress: dict[str, Any]) -> bool:
    """Whether the Run page must keep refreshing: the run is queued or running, or it has ended but
    the job manager has not yet stored its last points (see JobManager.progress)."""
    return progress.get("state") in LIVE_STATES or progress.get("settled") is False
STAGE_WORDS = {"load": "loading the model", "calibrate": "measuring this device's ceilings",
               "setup": "setting up the batch shape",
               "warmup": "warming up", "measure": "measuring", "store": "summarising and storing the point"}


def format_duration(seconds: float | None) -> str:
    """`2 h 03 min`, `4 min 05 s`, `12 s`; an em dash when unknown."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)) or seconds < 0:
        return "—"
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


@dataclass(frozen=True)
class ProgressView:
    """What the progress strip says while a sweep is queued or running."""

    state: str
    fraction: float
    headline: str
    current: str
    elapsed: str
    eta: str
    live: bool


def point_labels(spec: dict[str, Any] | None) -> list[str] | None:
    """What each planned point of a continuous or endpoint sweep is called along its axis ("arrival rate 4
    req/s"), since its batch_size alone (the fixed limit of a rate sweep) would name every point alike; None
    for a static sweep or a spec this version cannot read."""
    if not spec or not is_load_driven(spec.get("mode")):
        return None
    known = {f.name for f in fields(SweepSpec)}
    try:
        planned = points(SweepSpec(**{k: v for k, v in spec.items() if k in known}))
    except (TypeError, ValueError):
        return None
    return [AXES[point.axis].at(point.value) for point in planned]


def most_runs(spec: dict[str, Any]) -> int | None:
    """The measured runs a point of this stored spec may take (SweepSpec.most_runs), None without repeats."""
    if "repeats" not in spec:
        return None
    return SweepSpec(model="", **{k: spec[k] for k in ("repeats", "replays", "max_draws") if k in spec}).most_runs()


def progress_view(progress: dict[str, Any], repeats: int | None = None,
                  labels: list[str] | None = None, stored: int | None = None) -> ProgressView:
    """Words and a 0..1 fraction from JobManager.progress (status.json plus elapsed, ETA, queue place);
    `repeats` is the most measured runs a point may take (`most_runs`); `labels` name the points (see `point_labels`); `stored` is how many points the history holds, so
    the strip says when the runner is ahead of the charts. The current point is named only while one
    is being measured: after the last, a stale "Now: point 3" would contradict "3 of 3 points done"."""
    state = str(progress.get("state") or "unknown")
    done = int(progress.get("points_done") or 0)
    total = int(progress.get("points_total") or 0)
    fraction = min(1.0, done / total) if total else 0.0
    headline = f"{done} of {total} points done" if total else f"{done} points done"
    if stored is not None and stored < done:
        headline += f" · {done - stored} being stored"
    if state == "queued":
        place = progress.get("queue_position")
        headline = f"queued — position {place} in the queue" if place else "queued — waiting for the GPU"
    measuring = state == "running" and (not total or done < total)
    return ProgressView(state=state, fraction=fraction, headline=headline,
                        current=_current_words(progress.get("current"), repeats, labels) if measuring else "",
                        elapsed=format_duration(progress.get("elapsed_s")),
                        eta=format_duration(progress.get("eta_s")), live=state in LIVE_STATES)


def placement_words(progress: dict[str, Any], spec: dict[str, Any]) -> str | None:
    """Where a run sent to the Ray cluster runs, ran, or waits (its node, from status.json), for the line
    under the Run page's title; None for a run of this machine."""
    gpu = spec.get("cluster_gpu")
    if not gpu:
        return None
    count = ranks(spec)
    gpus = f"{count} {gpu} GPU{'s' if count > 1 else ''}"
    node, live = progress.get("node"), progress.get("state") in LIVE_STATES
    if node:
        return f"{'Runs' if live else 'Ran'} on Ray cluster node {node} ({gpus})."
    if live:
        return f"Waiting on the Ray cluster for {gpus} on one node."
    return f"Sent to the Ray cluster for {gpus}; it never started on a node."


def no_results_words(progress: dict[str, Any]) -> str:
    """What the results area says before any point is stored, agreeing with the progress strip."""
    done = int(progress.get("points_done") or 0)
    if done:
        return (f"{done} point{'s are' if done > 1 else ' is'} finished and being stored: the charts appear "
                f"in a moment.")
    return "No finished points yet: the charts appear as soon as the first point is measured."


def _current_words(current: dict[str, Any] | None, repeats: int | None, labels: list[str] | None) -> str:
    if not current:
        return ""
    index = current.get("point_index")
    words = [] if index is None else [f"point {int(index) + 1}"]
    if labels is not None and index is not None and 0 <= int(index) < len(labels):
        words.append(labels[int(index)])
    elif current.get("batch_size") is not None:
        words.append(f"batch {current['batch_size']}")
    stage = current.get("stage")
    if stage:
        stage_text = STAGE_WORDS.get(stage, str(stage))
        if stage == "measure" and current.get("repeat") is not None:
            run = int(current["repeat"]) + 1
            stage_text += f" (run {run}{f', at most {repeats}' if repeats else ''})"
        words.append(stage_text)
    return " · ".join(words)


def timeline_points(table: pd.DataFrame, axis: SweepAxis) -> dict[int, str]:
    """The ok points a step timeline can be drawn for: point index → "batch 64" / "arrival rate 4 req/s"."""
    ok = table[table["status"] == "ok"].assign(x=sweep_x(table)).sort_values("x")
    return {int(row.point_index): axis.at(row.x) for row in ok.itertuples()}


def step_replicas(steps: pd.DataFrame) -> list[int]:
    """The replicas a point's steps come from (empty for a single engine, whose replica is null)."""
    if "replica" not in steps:
        return []
    return sorted(int(r) for r in steps["replica"].dropna().unique())


def timeline_limits(table: pd.DataFrame, point_index: int) -> tuple[float | None, float | None, float | None]:
    """(KV cache capacity in tokens, max_num_seqs, KV block size) of one point, None where the run did not
    record it."""
    row = table[table["point_index"] == point_index].iloc[0]

    def known(column: str) -> float | None:
        value = row.get(column)
        return None if value is None or pd.isna(value) else float(value)

    return known("kv_capacity_tokens"), known("max_num_seqs"), known("kv_block_size")


def latency_words(env: dict[str, Any] | None) -> str:
    """What a continuous or endpoint run's latency percentiles count, by its env.json's `latency_basis`
    (runners/metrics/loaded.py): a run made before it counted every request."""
    if (env or {}).get("latency_basis"):
        return ("Its latencies count the requests that arrived inside it, the drain's included; a closed loop's "
                "first round, sent all at once at the start, is left out.")
    return ("Its latencies count every request, a closed loop's first round (sent all at once at the start) "
            "included: the run was made before latencies were counted over the window.")


def load_window(repeats: pd.DataFrame, point_index: int, repeat: int) -> tuple[float, float] | None:
    """One repeat's load window in ms (runners.metrics.loaded), None where it had none (a static batch, a
    load sent at once, a run from before the window was recorded)."""
    if "loaded_start_ms" not in repeats:
        return None
    rows = repeats[(repeats["point_index"] == point_index) & (repeats["repeat"] == repeat)]
    if rows.empty or rows[["loaded_start_ms", "loaded_end_ms"]].isna().any(axis=None):
        return None
    return float(rows["loaded_start_ms"].iloc[0]), float(rows["loaded_end_ms"].iloc[0])


def workload_lines(spec: dict[str, Any] | None) -> list[str]:
    """The run's workload as a tuner reads it before trusting a number: lengths, what one point runs
    (warm-up, repeats, requests), the sweep and its settings; empty when the spec was not recorded."""
    if not spec:
        return []
    warmup = int(spec.get("warmup") or 0)
    measures, runs, exact = runs_words(spec)
    upto = "" if exact else "at most "
    lines = [f"Prompts {spec.get('prompt_len', '?')} · outputs {spec.get('output_len', '?')} tokens · "
             f"seed {spec.get('seed', 0)}"]
    ahead = f"{warmup} warm-up repeat{'s' if warmup != 1 else ''}, then " if warmup else ""
    if is_load_driven(spec.get("mode")):
        requests, per_client = int(spec.get("num_requests") or 0), int(spec.get("requests_per_client") or 0)
        load = (f"Poisson arrivals {spec['arrival'].removeprefix('poisson:')} req/s" if spec.get("arrival")
                else f"{_listed(spec.get('concurrency'))} concurrent clients")
        served = (f"{per_client} requests per client, the first of {requests} (at most {requests * runs:,} measured)"
                  if per_client and spec.get("concurrency") else f"{requests} requests ({upto}{requests * runs:,} measured)")
        lines.append(f"Each point: {ahead}{measures} of {served} · {load}")
        if measures_a_server(spec.get("mode")):
            lines.append(" · ".join(part for part in (
                f"Server {spec.get('url')} · model {spec.get('model_name') or 'its first listed'}",
                spec.get("server_labels") and f"labels: {spec['server_labels']}",
                spec.get("server_command") and f"restarted per point: {spec['server_command']}") if part))
            return lines
        lines.append(f"max_num_seqs {_listed(spec.get('max_num_seqs'))} · token budget per step "
                     f"{int(spec.get('max_num_batched_tokens') or 0):,} · engine {spec.get('engine')} · "
                     f"device {spec.get('device')}")
        return lines
    lines.append(f"Each point: {ahead}{measures}, each one batch of as many requests as the batch size "
                 f"({upto}{runs} × B measured)")
    lines.append(f"Batch sizes {_listed(spec.get('batch_sizes'))} · after an OOM: {spec.get('on_oom', 'stop')} · "
                 f"engine {spec.get('engine')} · device {spec.get('device')}")
    return lines


def runs_words(spec: dict[str, Any]) -> tuple[str, int, bool]:
    """What each point measures, in words, the most runs it may take and whether it takes exactly those: its
    repeats, or for a run measured until known (a target interval in its spec) its planned draws and replays,
    then draws until the target."""
    repeats = int(spec.get("repeats") or 1)
    target = float(spec.get("target_interval") or 0)
    if target <= 0:
        return f"{repeats} measured repeat{'s' if repeats != 1 else ''}", repeats, True
    replays = int(spec.get("replays") or 0)
    again = f" and {replays} replay{'s' if replays != 1 else ''}" if replays else ""
    most = most_runs(spec) or repeats
    return (f"{repeats} draw{'s' if repeats != 1 else ''}{again}, then more draws until the throughput is known "
            f"within ± {pct(target)} (at most {most} runs)", most, False)


def _listed(value: object) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def noise_warning(run: dict[str, Any], table: pd.DataFrame, axis: SweepAxis) -> str | None:
    """Why this run's numbers may not repeat, or None: it ran on a CPU, which it shares with everything
    else on the machine (identical tiny sweeps on a 2-core machine gave 28, 728 and 600 tok/s at batch
    1), or its repeats differ by more than NOISY_SPREAD at some point."""
    found = []
    env = run.get("env") or {}
    if (env.get("device") or run.get("device")) == "cpu":
        cores = env.get("cpu_count")
        found.append(f"This run measured a CPU{f' with {cores} cores' if cores else ''}, shared with everything "
                     f"else running on that machine: the same sweep can differ several-fold from one run to the next.")
    ok = table[table["status"] == "ok"] if "status" in table else table
    if {"output_tokens_per_s_min", "output_tokens_per_s_max"} <= set(ok.columns) and not ok.empty:
        spread = (ok["output_tokens_per_s_max"] - ok["output_tokens_per_s_min"]) / ok["output_tokens_per_s"]
        if spread.notna().any() and spread.max() > NOISY_SPREAD:
            worst = ok.loc[spread.idxmax()]
            found.append(f"Its repeats differ by up to {pct(spread.max())} of the median ({axis.at(worst['x'])}: "
                         f"{describe_spread(worst)}).")
    if not found:
        return None
    return " ".join(found) + " Read the repeat bands, and compare runs only from the same device under the same load."


def on_gpu(run: dict[str, Any]) -> bool:
    """Whether the run measured a GPU (a CPU run gets no per-GPU words or GPU-hour prices)."""
    env = run.get("env") or {}
    return (env.get("device") or run.get("device")) != "cpu"


def marker_sentences(analysis: Any) -> list[str]:
    """The one-sentence explanations of each marker, then the analysis notes (why a marker is absent)."""
    sentences = [marker.sentence for marker in (analysis.plateau, analysis.kneedle, analysis.slo_limit,
                                                analysis.working_point) if marker is not None]
    return sentences + list(analysis.notes)


def run_title(run: dict[str, Any]) -> str:
    """`name — model · dtype · engine` for the page header (a stored run's `model` is its facts dict)."""
    model = run.get("model")
    spec = run.get("spec") or {}
    model_name = model.get("name") if isinstance(model, dict) else model
    parts = [str(v) for v in (model_name or spec.get("model"), run.get("dtype"), run.get("engine")) if v]
    if (spec.get("tensor_parallel") or 1) > 1:
        parts.append(f"tensor parallel {spec['tensor_parallel']}")
    if (spec.get("replicas") or 1) > 1:
        parts.append(f"{spec['replicas']} replicas")
    name = run.get("name") or run.get("run_id")
    return f"{name} — {' · '.join(parts)}" if parts else str(name)


@dataclass
class RunData:
    """One stored run ready to draw: its record, the analysed points table, markers and memory split."""

    run: dict[str, Any]
    analysis: Analysis | None
    split: pd.DataFrame
    per_gpu: pd.DataFrame | None = None  # Store.gpu_utilisation: each GPU's utilisation per point
    # what pages made from this analysis (run_cache.made), shared by the copies RunCache hands out
    made: dict[Hashable, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def table(self) -> pd.DataFrame:
        return self.analysis.table if self.analysis is not None else pd.DataFrame()


def load_run(store: Store, run_id: str, slo: SLO | None) -> RunData | None:
    """Read and analyse a run; None for an unknown id. A run with no points yet has no analysis.
    Pages go through `run_cache.RunCache`, which calls this only when the stored run has changed."""
    run = store.run(run_id)
    if run is None:
        return None
    points = store.points([run_id])
    if points.empty:
        return RunData(run, None, pd.DataFrame(columns=["batch_size", "x", "status", "part", "bytes"]))
    analysis = analyse(points, run.get("model"), run.get("calibration"), slo, evidence=store.point_evidence(run_id))
    return RunData(run, analysis, memory_split(points), store.gpu_utilisation(run_id))
