"""A verdict per metric of each point (docs/trust.md): throughput, every latency percentile and memory.

A fault in one metric says nothing of another: a P95 read from 3 requests is not a P95, while the same
point's throughput, from replays that agree within 1 %, is as good as any. So each check concerns the
metrics it bears on: measurement noise, the interval, warm-up drift and tokens delivered concern
throughput; the percentile sample concerns its own percentile; outlier steps, host bound, SM clock and
other processes concern every timed metric; other processes also concern memory. A metric's verdict is
its worst check; `trust`, the point's summary, is the worst over the metrics the working point reads.
"""
from __future__ import annotations

import pandas as pd

from batchscope.analysis.trust import (LEVELS, Finding, clock_finding, drift_finding, host_finding,
                                       interval_finding, known, measured_interval_finding, noise_finding,
                                       outlier_finding, percentile_finding, processes_finding, spread_finding,
                                       tokens_finding)
from batchscope.metric_catalogue import LATENCY_NAMES, latency_column
from runners.results.schemas import PERCENTILES

THROUGHPUT, MEMORY = "throughput", "memory"


def metric_of(column: str) -> str | None:
    """The metric a summary column shows: `throughput`, `ttft_p95`, …, `memory`; None for one not judged."""
    if column.startswith("output_tokens_per_s"):
        return THROUGHPUT
    for name in LATENCY_NAMES:
        for p in PERCENTILES:
            if column == latency_column(name, p):
                return f"{name}_p{p}"
    return MEMORY if column.startswith("mem_") else None


def metric_name(metric: str) -> str:
    """ "throughput", "P95 TTFT", "memory": as a sentence names it."""
    if metric in (THROUGHPUT, MEMORY):
        return metric
    name, p = metric.rsplit("_p", 1)
    return f"P{p} {LATENCY_NAMES[name]}"


def judge(point: pd.Series, evidence: pd.Series | None) -> dict[str, list[Finding]]:
    """Every metric the point recorded → the checks that concern it, the main one first."""
    shared = _shared(point, evidence)
    found = {THROUGHPUT: _throughput(point, evidence) + shared}
    for name in LATENCY_NAMES:
        samples = _samples(evidence, name)
        for p in PERCENTILES:
            if known(point.get(latency_column(name, p))):
                sample = [] if samples is None else [
                    percentile_finding(samples, p, "inter-token gaps" if name == "itl" else "requests")]
                found[f"{name}_p{p}"] = sample + shared
    if known(point.get("mem_peak_allocated")):
        found[MEMORY] = [Finding("memory read", "trusted", "Memory is the allocator's peak, read, not timed: "
                                                           "no timing check concerns it.")]
        found[MEMORY] += [f for f in shared if f.check == "other processes"]
    return found


def level_of(found: list[Finding]) -> dict[str, object]:
    """{"level", "reasons"}: the worst check's level; its reasons are the checks below trusted, worst first,
    or, when all pass, the main check's sentence."""
    level = max((f.level for f in found), key=LEVELS.index, default="trusted")
    doubtful = sorted((f for f in found if f.level != "trusted"), key=lambda f: -LEVELS.index(f.level))
    reasons = ([f.sentence for f in doubtful] or [f.sentence for f in found[:1]]
               or ["No check applies to it in what this run recorded."])
    return {"level": level, "reasons": reasons}


def assess(points: pd.DataFrame, evidence: pd.DataFrame | None, reads: list[str]) -> pd.DataFrame:
    """Per point: `trust_metrics` (metric → {"level", "reasons"}), a `trust_<metric>` level column per
    metric (what a chart of that metric reads), and `trust` with `trust_sentence`: the worst over `reads`,
    the metrics the working point's rule reads (null for a point that did not finish)."""
    by_point = evidence.set_index("point_index") if evidence is not None and not evidence.empty else None
    rows = []
    for _, point in points.iterrows():
        if point["status"] != "ok":
            rows.append({"trust": None, "trust_sentence": None, "trust_metrics": None})
            continue
        index = point.get("point_index")
        extra = by_point.loc[index] if by_point is not None and index in by_point.index else None
        verdicts = {metric: level_of(found) for metric, found in judge(point, extra).items()}
        rows.append({**_summary(verdicts, reads), "trust_metrics": verdicts,
                     **{f"trust_{metric}": v["level"] for metric, v in verdicts.items()}})
    frame = pd.DataFrame(rows, index=points.index)
    return frame.reindex(columns=["trust", "trust_sentence", "trust_metrics",
                                  *sorted(c for c in frame.columns if c.startswith("trust_") and c not in
                                          ("trust_sentence", "trust_metrics"))])


def worst(verdicts: dict[str, dict] | None) -> dict[str, object] | None:
    """The worst level over every metric and the metrics at it: the summary beside the report's `trust`."""
    if not verdicts:
        return None
    level = max((v["level"] for v in verdicts.values()), key=LEVELS.index)
    return {"level": level, "metrics": [m for m, v in verdicts.items() if v["level"] == level]}


def for_json(records: list[dict]) -> list[dict]:
    """Points as the report's JSON gives them: `trust` the metric → {"level", "reasons"} object, with
    `trust_worst` beside it; the working point's summary stays as `trust_working_point` (level) and
    `trust_sentence`; the per-metric level columns, which only charts read, are left out."""
    out = []
    for record in records:
        verdicts = record.get("trust_metrics")
        kept = {k: v for k, v in record.items() if not k.startswith("trust")}
        out.append({**kept, "trust": verdicts, "trust_worst": worst(verdicts),
                    "trust_working_point": record.get("trust"), "trust_sentence": record.get("trust_sentence")})
    return out


def throughput_words(verdicts: dict[str, dict] | None) -> str | None:
    """The cell beside a point's throughput: its level and why ("trusted: Throughput 512 tok/s ± 3.1 % …")."""
    if not verdicts or THROUGHPUT not in verdicts:
        return None
    verdict = verdicts[THROUGHPUT]
    return f"{verdict['level']}: {' '.join(verdict['reasons'])}"


def latency_words(verdicts: dict[str, dict] | None) -> str | None:
    """The cell beside a point's latencies: each percentile not trusted with its first reason, or that every
    one is trusted."""
    if not verdicts:
        return None
    doubtful = [f"{metric_name(m)} {v['level']} ({v['reasons'][0].rstrip('.')})" for m, v in verdicts.items()
                if m not in (THROUGHPUT, MEMORY) and v["level"] != "trusted"]
    return "; ".join(doubtful) if doubtful else "trusted, every percentile"


def _summary(verdicts: dict[str, dict], reads: list[str]) -> dict[str, str]:
    read = {m: verdicts[m] for m in reads if m in verdicts}
    level = max((v["level"] for v in read.values()), key=LEVELS.index, default="trusted")
    if level == "trusted":
        return {"trust": level, "trust_sentence": f"Trusted for {', '.join(map(metric_name, read))}."}
    named = [f"{_capital(metric_name(m))}: {v['reasons'][0].rstrip('.')}" for m, v in read.items()
             if v["level"] == level]
    return {"trust": level, "trust_sentence": "; ".join(named) + "."}


def _capital(text: str) -> str:
    return text[0].upper() + text[1:]


def _throughput(point: pd.Series, evidence: pd.Series | None) -> list[Finding]:
    """A run measured until known: its interval and its replays' noise. An older run: the repeats' spread,
    interval and drift (its repeats were new draws, so their spread mixes workload variance in)."""
    draws = point.get("draws")
    if known(draws):
        found = [measured_interval_finding(point, int(draws))]
        if known(point.get("replay_spread")):
            found.append(noise_finding(float(point["replay_spread"]), int(point.get("replays") or 0) + 1))
    else:
        tput = _repeat_tput(point, evidence)
        found = [f for f in (interval_finding(tput), spread_finding(tput), drift_finding(tput)) if f is not None]
    if evidence is not None and known(evidence.get("generated_tokens")) and evidence.get("requested_tokens"):
        found.append(tokens_finding(float(evidence["generated_tokens"]), float(evidence["requested_tokens"])))
    return found


def _shared(point: pd.Series, evidence: pd.Series | None) -> list[Finding]:
    """The checks of the point's conditions, which bear on every timed metric."""
    found = []
    if known(point.get("outlier_steps")):
        steps = evidence.get("steps") if evidence is not None else None
        found.append(outlier_finding(int(point["outlier_steps"]), int(steps) if known(steps) else None))
    util = point.get("gpu_util_pct_decode") if known(point.get("gpu_util_pct_decode")) else point.get("gpu_util_pct")
    if known(util):
        cpu = point.get("cpu_pct")
        found.append(host_finding(float(util), float(cpu) if known(cpu) else None))
    if known(point.get("sm_clock_mhz_min")) and known(point.get("sm_clock_mhz_max")):
        reasons = point.get("clock_reasons")
        found.append(clock_finding(float(point["sm_clock_mhz_min"]), float(point["sm_clock_mhz_max"]),
                                   reasons if isinstance(reasons, str) else None, _noise(point)))
    if known(point.get("gpu_processes_max")) and int(point["gpu_processes_max"]) > 0:
        found.append(processes_finding(int(point["gpu_processes_max"]), 1))
    return found


def _noise(point: pd.Series) -> float | None:
    """How far the same requests replayed ran apart; None for an older run, whose repeats were new draws,
    so their spread is workload variance and says nothing of the step times."""
    return float(point["replay_spread"]) if known(point.get("replay_spread")) else None


def _repeat_tput(point: pd.Series, evidence: pd.Series | None) -> list[float]:
    """Each repeat's output tokens/s in repeat order; the summary's min and max stand in without them."""
    listed = evidence.get("repeat_tokens_per_s") if evidence is not None else None
    if known(listed) and len(listed):
        return [float(v) for v in listed]
    low, high = point.get("output_tokens_per_s_min"), point.get("output_tokens_per_s_max")
    count = point.get("repeats")
    if known(low) and known(high) and known(count) and int(count) > 1:
        return [float(low), float(high)]
    return [float(point["output_tokens_per_s"])]


def _samples(evidence: pd.Series | None, metric: str) -> int | None:
    """What a percentile of `metric` is taken over: the requests whose latency counts, or for ITL their
    inter-token gaps (store_reads.point_evidence)."""
    column = "latency_gaps" if metric == "itl" else "latency_requests"
    if evidence is None or not known(evidence.get(column)):
        return None
    return int(evidence[column])
