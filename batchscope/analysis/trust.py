"""Whether a point's numbers can be trusted: each check's rule, threshold and sentence (docs/trust.md).

A check reads only what the runner recorded: the summary row, each repeat's throughput, and the point's
request and step counts (`Store.point_evidence`). A check whose data the run did not record (an old run,
a CPU run with no GPU clocks) does not apply and is left out. Which checks concern which metric, and each
metric's verdict, is `analysis.verdicts`.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pandas as pd

from batchscope.analysis.marker import num, pct

from runners.metrics.interval import t95

LEVELS = ("trusted", "caution", "untrusted")
INTERVAL_UNTRUSTED = 0.25  # a throughput known no better than ± this is not a number to act on
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

# Each check's rule with its thresholds, as the page's help and docs/trust.md state them.
RULES = {
    "measurement noise": f"(max − min) ÷ median throughput of the same requests replayed: over {pct(NOISY_SPREAD)} "
                         f"untrusted, over {pct(SPREAD_CAUTION)} caution.",
    "throughput interval": f"the 95 % interval the runner measured the throughput to: within the sweep's target "
                           f"(default ± 5 %; ± {pct(CI_CAUTION)} when it set none) trusted, within "
                           f"± {pct(INTERVAL_UNTRUSTED)} caution, wider untrusted.",
    "repeat spread": f"(max − min) ÷ median of the repeats' output tokens/s: over {pct(NOISY_SPREAD)} untrusted, "
                     f"over {pct(SPREAD_CAUTION)} caution; one repeat is caution (no spread to read).",
    "confidence interval": f"95 % interval of the mean throughput over the repeats (Student's t): a half-width over "
                           f"{pct(CI_CAUTION)} of the mean is caution.",
    "percentile sample": f"the requests the percentile counts × (1 − p) must lie beyond the latency percentile p "
                         f"read (the SLO's, else P95; ITL counts their inter-token gaps): under 1 untrusted, "
                         f"under {TAIL_CAUTION} caution.",
    "outlier steps": f"measured steps over 5× the median of like steps: any is caution, over "
                     f"{pct(OUTLIER_UNTRUSTED)} of the point's steps untrusted.",
    "warm-up drift": f"(last − first repeat) ÷ median throughput: beyond ± {pct(DRIFT_UNTRUSTED)} untrusted, beyond "
                     f"± {pct(DRIFT_CAUTION)} caution.",
    "tokens delivered": f"tokens the engine delivered ÷ tokens requested, over every request: any difference is "
                        f"caution, over {pct(TOKENS_UNTRUSTED)} untrusted.",
    "host bound": f"GPU busy (NVML utilisation in decode) under {num(HOST_GPU_UTIL)} % while the runner's process "
                  f"keeps a core over {num(HOST_CPU_PCT)} % busy: caution.",
    "SM clock": f"NVML naming a thermal, hardware-slowdown or power-brake reason in the repeats is untrusted; the "
                f"clock's lowest sample more than {pct(CLOCK_DROP)} under its highest is caution only when the "
                f"step times moved too (replays over {pct(SPREAD_CAUTION)} apart); a power cap alone is named.",
    "other processes": "more processes holding a GPU than the one rank of this sweep on it: caution (NVML's list, "
                       "taken at each stage; a container that hides other processes shows none).",
}


@dataclass(frozen=True)
class Finding:
    """One check's outcome for one point."""

    check: str
    level: str
    sentence: str


def known(value: object) -> bool:
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
    return Finding("outlier steps", level, f"Measured steps over 5× the median of like steps: {outliers:,}{of} (a "
                                           f"compile, autotune or allocation inside a measured step).")


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


def clock_finding(low: float, high: float, reasons: str | None, noise: float | None) -> Finding:
    """An H200 under its power cap moves its clock all the time: only a throttle, or a clock change that
    shows in the step times (`noise`: how far the same requests replayed ran apart), is judged."""
    named = [r for r in (reasons or "").split(",") if r]
    throttled = [r for r in named if r in THROTTLES]
    drop = 1.0 - low / high if high else 0.0
    because = f" (NVML: {', '.join(named)})" if named else ""
    if throttled:
        return Finding("SM clock", "untrusted", f"The GPU throttled during the repeats (NVML: {', '.join(throttled)}); "
                                                f"its SM clock ran {num(low)}–{num(high)} MHz.")
    if drop > CLOCK_DROP and noise is not None and noise > SPREAD_CAUTION:
        return Finding("SM clock", "caution", f"The SM clock fell {pct(drop)} during the repeats "
                                              f"({num(high)} → {num(low)} MHz){because} while the same requests "
                                              f"replayed ran {pct(noise, 1)} apart: the clock change shows in the "
                                              f"step times.")
    if drop > CLOCK_DROP:
        steady = (", and no replay was recorded to show whether the step times moved" if noise is None
                  else f", and the same requests replayed ran within {pct(noise, 1)}")
        return Finding("SM clock", "trusted", f"The SM clock moved {num(low)}–{num(high)} MHz{because}{steady}: "
                                              f"NVML names no throttle, so it is read as power management.")
    return Finding("SM clock", "trusted", f"The SM clock held at {num(low)}–{num(high)} MHz.")


def noise_finding(spread: float, runs: int) -> Finding:
    """The same requests replayed: what is left is measurement noise, apart from workload variance."""
    level = "untrusted" if spread > NOISY_SPREAD else "caution" if spread > SPREAD_CAUTION else "trusted"
    words = {"untrusted": "the measurement does not repeat", "caution": "read it with that in mind",
             "trusted": "the measurement repeats"}[level]
    return Finding("measurement noise", level, f"The same requests run {runs} times came within {pct(spread, 1)} "
                                               f"of each other: {words}.")


# The runner's interval methods that predict draws (runners/metrics/interval.py, open_loop.py), in words; `draws`
# predicts none
MODEL_WORDS = {"model": "a step-time model", "queue": "a slot-queue model of the arrivals"}


def measured_interval_finding(point: pd.Series, draws: int) -> Finding:
    """The interval the runner measured the throughput to, how, and whether a budget ran out first."""
    half, target = point.get("tokens_per_s_interval"), point.get("target_interval")
    goal = float(target) if known(target) and target else CI_CAUTION
    if not known(half):
        tput = num(point["output_tokens_per_s"])
        return Finding("throughput interval", "caution", f"One draw of requests only: its throughput ({tput} "
                                                         f"tok/s) has no interval.")
    half = float(half)
    level = "trusted" if half <= goal else "caution" if half <= INTERVAL_UNTRUSTED else "untrusted"
    model = MODEL_WORDS.get(point.get("interval_method"))
    how = (f"{model} over many host draws, checked against {draws} measured draws"
           + (f" (each within {pct(float(point['prediction_error_max']), 1)} of its prediction)"
              if known(point.get("prediction_error_max")) else "")
           if model else f"{draws} draws")
    spent = point.get("budget_spent")
    short = (f"; the {'draw' if spent == 'draws' else 'time'} budget ran out short of the ± {pct(goal)} target"
             if isinstance(spent, str) else "")
    return Finding("throughput interval", level, f"Throughput {num(point['output_tokens_per_s'])} tok/s ± "
                                                 f"{pct(half, 1)} (95 % interval) from {how}{short}.")


def processes_finding(listed: int, ranks: int) -> Finding:
    if listed > ranks:
        return Finding("other processes", "caution", f"Processes that held the GPU during this point: {listed}, "
                                                     f"{ranks} of them this sweep's: if another computed, it took "
                                                     f"GPU time from the sweep.")
    return Finding("other processes", "trusted", "No other process held the GPU.")
