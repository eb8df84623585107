"""Whether a point's measurement can be trusted: each check's rule, threshold and sentence (docs/trust.md).

A check reads only what the runner recorded: the summary row, each repeat's throughput, and the point's
request and step counts (`Store.point_evidence`). A check whose data the run did not record (an old run,
a CPU run with no GPU clocks) does not apply and is left out. A point's verdict is its worst check:
`trusted`, `caution` (read it with care) or `untrusted` (drawn hollow, and the working point avoids it
unless nothing else qualifies, which its sentence then says).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pandas as pd

from batchscope.analysis.marker import num, pct

LEVELS = ("trusted", "caution", "untrusted")
BADGES = {"trusted": "✅ trusted", "caution": "⚠️ caution", "untrusted": "⛔ untrusted"}
NOISY_SPREAD = 0.25  # repeats further apart than this share of their median do not repeat
SPREAD_CAUTION = 0.05
CI_CAUTION = 0.10
TAIL_CAUTION = 10  # requests beyond a percentile for it to be read with confidence
DRIFT_CAUTION, DRIFT_UNTRUSTED = 0.05, 0.15
OUTLIER_UNTRUSTED = 0.01
TOKENS_UNTRUSTED = 0.01
HOST_GPU_UTIL, HOST_CPU_PCT = 50.0, 90.0
CLOCK_DROP = 0.10
THROTTLES = ("hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")
# Student's t for a two-sided 95 % interval, by degrees of freedom (1..30); 1.96 beyond
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
       2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)

# Each check's rule with its thresholds, as the page's help and docs/trust.md state them.
RULES = {
    "repeat spread": f"(max − min) ÷ median of the repeats' output tokens/s: over {pct(NOISY_SPREAD)} untrusted, "
                     f"over {pct(SPREAD_CAUTION)} caution; one repeat is caution (no spread to read).",
    "confidence interval": f"95 % interval of the mean throughput over the repeats (Student's t): a half-width over "
                           f"{pct(CI_CAUTION)} of the mean is caution.",
    "percentile sample": f"requests × (1 − p) must lie beyond the latency percentile p read (the SLO's, else P95; "
                         f"ITL counts inter-token gaps): under 1 untrusted, under {TAIL_CAUTION} caution.",
    "outlier steps": f"measured steps over 5× the median of like steps: any is caution, over "
                     f"{pct(OUTLIER_UNTRUSTED)} of the point's steps untrusted.",
    "warm-up drift": f"(last − first repeat) ÷ median throughput: beyond ± {pct(DRIFT_UNTRUSTED)} untrusted, beyond "
                     f"± {pct(DRIFT_CAUTION)} caution.",
    "tokens delivered": f"tokens the engine delivered ÷ tokens requested, over every request: any difference is "
                        f"caution, over {pct(TOKENS_UNTRUSTED)} untrusted.",
    "host bound": f"GPU busy (NVML utilisation in decode) under {num(HOST_GPU_UTIL)} % while the runner's process "
                  f"keeps a core over {num(HOST_CPU_PCT)} % busy: caution.",
    "SM clock": f"the SM clock's lowest sample in the repeats more than {pct(CLOCK_DROP)} under its highest is "
                f"caution; NVML naming a thermal, hardware-slowdown or power-brake reason is untrusted.",
    "other processes": "more processes holding a GPU than the one rank of this sweep on it: caution (NVML's list, "
                       "taken at each stage; a container that hides other processes shows none).",
}


@dataclass(frozen=True)
class Finding:
    """One check's outcome for one point."""

    check: str
    level: str
    sentence: str


def t95(n: int) -> float:
    """Student's t quantile for a two-sided 95 % interval of a mean over n ≥ 2 values."""
    return T95[n - 2] if n - 1 <= len(T95) else 1.96


def _known(value: object) -> bool:
    """False for None, NaN and pandas' NA (a column an old run, or a point without details, lacks)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and value is not pd.NA


def spread_finding(tput: list[float]) -> Finding:
    if len(tput) < 2:
        return Finding("repeat spread", "caution", "Only one measured repeat: there is no spread to judge its "
                                                   "throughput by.")
    median = statistics.median(tput)
    spread = (max(tput) - min(tput)) / median
    level = "untrusted" if spread > NOISY_SPREAD else "caution" if spread > SPREAD_CAUTION else "trusted"
    words = {"untrusted": "the throughput does not repeat", "caution": "read its throughput with that in mind",
             "trusted": "they agree"}[level]
    return Finding("repeat spread", level, f"Its {len(tput)} repeats span {pct(spread, 1)} of their median "
                                           f"({num(min(tput))}–{num(max(tput))} tok/s): {words}.")


def interval_finding(tput: list[float]) -> Finding | None:
    if len(tput) < 2:
        return None
    mean = statistics.fmean(tput)
    half = t95(len(tput)) * statistics.stdev(tput) / math.sqrt(len(tput)) / mean
    level = "caution" if half > CI_CAUTION else "trusted"
    more = "; more repeats would narrow it" if level == "caution" else ""
    return Finding("confidence interval", level, f"The mean throughput is {num(mean)} tok/s ± {pct(half, 1)} "
                                                 f"(95 % interval over {len(tput)} repeats){more}.")


def percentile_finding(samples: int, percentile: int, what: str) -> Finding:
    tail = samples * (1.0 - percentile / 100.0)
    level = "untrusted" if tail < 1 else "caution" if tail < TAIL_CAUTION else "trusted"
    verdict = {"untrusted": f"it is the largest value seen, not a P{percentile}",
               "caution": f"fewer than {TAIL_CAUTION} lie beyond it, so one slow request moves it",
               "trusted": "enough lie beyond it"}[level]
    return Finding("percentile sample", level, f"P{percentile} rests on {samples:,} {what}, {num(tail)} of them "
                                               f"beyond it: {verdict}.")


def outlier_finding(outliers: int, steps: int | None) -> Finding:
    if outliers == 0:
        return Finding("outlier steps", "trusted", "No measured step took over 5× its like steps.")
    share = outliers / steps if steps else None
    level = "untrusted" if share is None or share > OUTLIER_UNTRUSTED else "caution"
    of = f" of {steps:,}" if steps else ""
    return Finding("outlier steps", level, f"{outliers:,}{of} measured steps took over 5× the median of like steps "
                                           f"(a compile, autotune or allocation inside a measured step).")


def drift_finding(tput: list[float]) -> Finding | None:
    if len(tput) < 2:
        return None
    drift = (tput[-1] - tput[0]) / statistics.median(tput)
    level = ("untrusted" if abs(drift) > DRIFT_UNTRUSTED else "caution" if abs(drift) > DRIFT_CAUTION
             else "trusted")
    cause = (" (still warming up?)" if drift > 0 else " (throttling, or something else started?)") \
        if level != "trusted" else ""
    return Finding("warm-up drift", level, f"The last repeat ran {pct(abs(drift), 1)} "
                                           f"{'faster' if drift >= 0 else 'slower'} than the first "
                                           f"({num(tput[0])} → {num(tput[-1])} tok/s){cause}.")


def tokens_finding(generated: float, requested: float) -> Finding:
    if generated == requested:
        return Finding("tokens delivered", "trusted", f"The engine delivered all {int(requested):,} requested tokens.")
    off = (generated - requested) / requested
    level = "untrusted" if abs(off) > TOKENS_UNTRUSTED else "caution"
    return Finding("tokens delivered", level, f"The engine delivered {int(generated):,} tokens for "
                                              f"{int(requested):,} requested ({'+' if off > 0 else '−'}"
                                              f"{pct(abs(off), 1)}): throughput counts requested tokens.")


def host_finding(gpu_util: float, cpu_pct: float | None) -> Finding:
    if gpu_util < HOST_GPU_UTIL and cpu_pct is not None and cpu_pct > HOST_CPU_PCT:
        return Finding("host bound", "caution", f"The GPU was busy only {num(gpu_util)} % of the decode time while "
                                                f"the runner kept a CPU core {num(cpu_pct)} % busy: the host, not "
                                                f"the GPU, set this pace.")
    return Finding("host bound", "trusted", f"The GPU was busy {num(gpu_util)} % of the decode time"
                                            + ("" if cpu_pct is None else f", the runner's CPU {num(cpu_pct)} %")
                                            + ".")


def clock_finding(low: float, high: float, reasons: str | None) -> Finding:
    named = [r for r in (reasons or "").split(",") if r]
    throttled = [r for r in named if r in THROTTLES]
    drop = 1.0 - low / high if high else 0.0
    because = f" (NVML: {', '.join(named)})" if named else ""
    if throttled:
        return Finding("SM clock", "untrusted", f"The GPU throttled during the repeats (NVML: {', '.join(throttled)}); "
                                                f"its SM clock ran {num(low)}–{num(high)} MHz.")
    if drop > CLOCK_DROP:
        return Finding("SM clock", "caution", f"The SM clock fell {pct(drop)} during the repeats "
                                              f"({num(high)} → {num(low)} MHz){because}.")
    return Finding("SM clock", "trusted", f"The SM clock held at {num(low)}–{num(high)} MHz.")


def processes_finding(listed: int, ranks: int) -> Finding:
    if listed > ranks:
        return Finding("other processes", "caution", f"{listed} processes held the GPU during this point, "
                                                     f"{ranks} of them this sweep's: if another computed, it took "
                                                     f"GPU time from the sweep.")
    return Finding("other processes", "trusted", "No other process held the GPU.")


def findings(point: pd.Series, evidence: pd.Series | None, percentile: int, metric: str) -> list[Finding]:
    """Every check that applies to one ok point, in RULES order."""
    tput = _repeat_tput(point, evidence)
    found = [spread_finding(tput), interval_finding(tput)]
    samples = _samples(evidence, metric)
    if samples is not None:
        found.append(percentile_finding(samples, percentile, "inter-token gaps" if metric == "itl" else "requests"))
    if _known(point.get("outlier_steps")):
        steps = evidence.get("steps") if evidence is not None else None
        found.append(outlier_finding(int(point["outlier_steps"]), int(steps) if _known(steps) else None))
    found.append(drift_finding(tput))
    if evidence is not None and _known(evidence.get("generated_tokens")) and evidence.get("requested_tokens"):
        found.append(tokens_finding(float(evidence["generated_tokens"]), float(evidence["requested_tokens"])))
    util = point.get("gpu_util_pct_decode") if _known(point.get("gpu_util_pct_decode")) else point.get("gpu_util_pct")
    if _known(util):
        cpu = point.get("cpu_pct")
        found.append(host_finding(float(util), float(cpu) if _known(cpu) else None))
    if _known(point.get("sm_clock_mhz_min")) and _known(point.get("sm_clock_mhz_max")):
        reasons = point.get("clock_reasons")
        found.append(clock_finding(float(point["sm_clock_mhz_min"]), float(point["sm_clock_mhz_max"]),
                                   reasons if isinstance(reasons, str) else None))
    if _known(point.get("gpu_processes_max")) and int(point["gpu_processes_max"]) > 0:
        found.append(processes_finding(int(point["gpu_processes_max"]), 1))
    return [f for f in found if f is not None]


def _repeat_tput(point: pd.Series, evidence: pd.Series | None) -> list[float]:
    """Each repeat's output tokens/s in repeat order; the summary's min and max stand in without them."""
    listed = evidence.get("repeat_tokens_per_s") if evidence is not None else None
    if _known(listed) and len(listed):
        return [float(v) for v in listed]
    low, high = point.get("output_tokens_per_s_min"), point.get("output_tokens_per_s_max")
    count = point.get("repeats")
    if _known(low) and _known(high) and _known(count) and int(count) > 1:
        return [float(low), float(high)]
    return [float(point["output_tokens_per_s"])]


def _samples(evidence: pd.Series | None, metric: str) -> int | None:
    """What a percentile of `metric` is taken over: requests, or for ITL their inter-token gaps."""
    if evidence is None or not _known(evidence.get("requests")):
        return None
    requests = int(evidence["requests"])
    if metric != "itl":
        return requests
    tokens = evidence.get("generated_tokens") if _known(evidence.get("generated_tokens")) else \
        evidence.get("requested_tokens")
    return int(tokens) - requests if _known(tokens) else None


def verdict(found: list[Finding]) -> tuple[str, str]:
    """(level, one sentence): the worst check's sentence, naming any other check that did not pass."""
    level = max((f.level for f in found), key=LEVELS.index, default="trusted")
    if level == "trusted":
        return level, f"All {len(found)} checks that apply pass."
    worst = [f for f in found if f.level == level]
    others = [f.check for f in found if f.level != "trusted" and f is not worst[0]]
    also = f" (also: {', '.join(others)})" if others else ""
    return level, worst[0].sentence.rstrip(".") + also + "."


def assess(points: pd.DataFrame, evidence: pd.DataFrame | None, percentile: int = 95,
           metric: str = "ttft") -> pd.DataFrame:
    """Per point: `trust` (a LEVELS value; null for a point that did not finish) and `trust_sentence`.

    `evidence` is Store.point_evidence (repeats' throughput, request and step counts by point_index);
    `percentile` and `metric` are the latency the page reads (the SLO's).
    """
    by_point = evidence.set_index("point_index") if evidence is not None and not evidence.empty else None
    rows = []
    for _, point in points.iterrows():
        if point["status"] != "ok":
            rows.append({"trust": None, "trust_sentence": None})
            continue
        index = point.get("point_index")
        extra = by_point.loc[index] if by_point is not None and index in by_point.index else None
        level, sentence = verdict(findings(point, extra, percentile, metric))
        rows.append({"trust": level, "trust_sentence": sentence})
    return pd.DataFrame(rows, index=points.index, columns=["trust", "trust_sentence"])
