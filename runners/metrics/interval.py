"""A point's throughput as an expectation over its workload, with a 95 % interval (docs/trust.md).

A static batch runs as long as its longest output, so one draw of lengths says little about the next:
at output lognormal:256:0.5 a batch's throughput varies about 19 % from draw to draw, and ±5 % from
draws alone needs about 60 of them. Its step times, though, repeat to a fraction of a percent. So the
`model` method predicts each draw's throughput from the point's measured step times, averages that
prediction over HOST_DRAWS draws made on the host (no GPU time), and corrects it by the measured draws'
ratio to their own predictions (a control variate), each draw predicted by the model fitted without it:
the interval then reflects how well the model predicts a draw it has not seen, not how much the lengths
vary. An open-loop continuous point has its own model of the same kind (runners.metrics.open_loop); where no
model predicts a draw (a closed-loop or endpoint point, whose draw is its whole request set and its clients),
the `draws` method is Student's t over the measured draws.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

HOST_DRAWS = 1000  # draws of lengths the model is averaged over, on the host
HOST_BASE = 1_000_000  # their draw numbers, far past any measured draw's
# Student's t for a two-sided 95 % interval, by degrees of freedom (1..30); 1.96 beyond
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
       2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(n: int) -> float:
    """Student's t quantile for a two-sided 95 % interval of a mean over n ≥ 2 values."""
    return T95[n - 2] if n - 1 <= len(T95) else 1.96


@dataclass(frozen=True)
class Interval:
    """A point's expected throughput and the half-width of its 95 % interval as a share of it (inf
    when nothing bounds it yet: one draw, no model)."""

    estimate: float
    half: float
    method: str  # "model" (static steps), "queue" (open-loop slots, runners.metrics.open_loop) or "draws"
    prediction_error_max: float | None = None  # the largest |measured ÷ predicted − 1| over the draws
    predicted: tuple[float, ...] = ()  # the model's throughput for each measured draw, in draw order

    def within(self, target: float) -> bool:
        return self.half <= target

    def columns(self) -> dict[str, float | str | None]:
        """The summary columns it fills: the figure shown, its bounds (which the knee's noise rule and the
        regression check read as its spread), the half-width, the method and the model's worst miss."""
        bounded = math.isfinite(self.half)
        return {"output_tokens_per_s": self.estimate,
                "output_tokens_per_s_min": self.estimate * max(0.0, 1 - self.half) if bounded else None,
                "output_tokens_per_s_max": self.estimate * (1 + self.half) if bounded else None,
                "tokens_per_s_interval": self.half if bounded else None, "interval_method": self.method,
                "prediction_error_max": self.prediction_error_max}


def by_draws(tput: Sequence[float]) -> Interval:
    """Student's t over the measured draws' throughput."""
    mean = statistics.fmean(tput)
    if len(tput) < 2:
        return Interval(mean, math.inf, "draws")
    return Interval(mean, t95(len(tput)) * statistics.stdev(tput) / math.sqrt(len(tput)) / mean, "draws")


def by_model(measured: Sequence[float], predicted: Sequence[float], host: Sequence[float],
             method: str) -> Interval:
    """The host draws' mean prediction × the measured draws' mean ratio to their predictions (`method` names the
    model that predicted them).

    The interval adds, in quadrature, the ratio's t-interval (how far the model is from the GPU) and the
    host average's own sampling error (small: HOST_DRAWS draws)."""
    ratios = [m / p for m, p in zip(measured, predicted)]
    mean_host = statistics.fmean(host)
    worst = max(abs(r - 1) for r in ratios)
    estimate = mean_host * statistics.fmean(ratios)
    if len(ratios) < 2:
        return Interval(estimate, math.inf, method, worst, tuple(predicted))
    model = t95(len(ratios)) * statistics.stdev(ratios) / math.sqrt(len(ratios)) / statistics.fmean(ratios)
    sampling = 1.96 * statistics.pstdev(host) / math.sqrt(len(host)) / mean_host
    return Interval(estimate, math.hypot(model, sampling), method, worst, tuple(predicted))


@dataclass(frozen=True)
class StepModel:
    """A static batch's time from its measured steps: a prefill of a fixed part (launches, sampling: most of a
    small batch's prefill) plus a part per padded prompt token, then one decode step for every output token after
    the first (a batch runs as long as its longest output), each a fixed part plus a part per KV token it
    attends to (decode_kv_tokens: `padded_rows` says whose prompt a row attends over). On an H100 hf-generate's 1B
    step at batch 64 rose from 30 to 80 ms with the padded KV (5.1 ms + 0.24 ms per 1 000 tokens), and a flat
    step missed its draws by up to 41 %; the fast engine's step (version 3) rose with its rows' own KV, 1.76 ms +
    0.0100 ms per 1 000 tokens at 1B batch 64, where the padded KV fitted its draws' steps with r² 0.04
    (docs/benchmarks.md, twenty-third and twenty-fourth sessions)."""

    prefill_fixed_ms: float
    prefill_ms_per_token: float
    step_fixed_ms: float
    step_ms_per_kv_token: float
    padded_rows: bool

    @classmethod
    def fit(cls, prefills: Sequence[tuple[int, float]], steps: Sequence[Sequence[tuple[int, float]]],
            padded_rows: bool) -> StepModel:
        """From each measured run's (padded prompt tokens, prefill ms) and, per run, its decode steps' (KV tokens,
        ms). The prefill is the least-squares line through the prefills, flat where noise tilts it down (a
        prefill never gets shorter for more tokens); through the origin when one run or one length gives no
        slope to fit. Its fixed part may come out below zero: attention makes a long prompt's prefill grow
        faster than its tokens, and the line is that curve's local slope over the lengths the draws spanned.
        The step's slope is the median of each run's own least-squares slope, never below zero, so a stretch
        of slow steps in one run (a busy host) does not tilt it; its fixed part is the median step less that
        slope's share (thousands of steps, which one run barely moves), and where that comes out below zero
        (a noisy slope over a few short runs) the step is the median of each step's ms per KV token."""
        tokens = [float(t) for t, _ in prefills]
        ms = [m for _, m in prefills]
        if len(set(tokens)) < 2:
            prefill = (0.0, statistics.fmean(ms) / statistics.fmean(tokens))
        else:
            slope = rising_slope(tokens, ms)
            prefill = (statistics.fmean(ms) - slope * statistics.fmean(tokens), slope)
        slopes = [rising_slope([k for k, _ in run], [m for _, m in run])
                  for run in steps if len({k for k, _ in run}) > 1]
        per_kv = statistics.median(slopes) if slopes else 0.0
        every = [(k, m) for run in steps for k, m in run]
        fixed = statistics.median(m - per_kv * k for k, m in every) if every else 0.0
        if fixed < 0:  # a step takes no less than nothing at no KV: through the origin instead
            return cls(*prefill, 0.0, statistics.median(m / k for k, m in every), padded_rows)
        return cls(*prefill, fixed, per_kv, padded_rows)

    def prefill_ms(self, prompt_lens: Sequence[int]) -> float:
        """Never below zero, wherever the line is read."""
        return max(0.0, self.prefill_fixed_ms + self.prefill_ms_per_token * padded_tokens(prompt_lens))

    def decode_ms(self, prompt_lens: Sequence[int], output_lens: Sequence[int]) -> float:
        """Every step after the first token: step k (1 … longest output − 1) attends to decode_kv_tokens(…, k)."""
        steps = max(output_lens) - 1
        prompts = decode_kv_tokens(prompt_lens, 0, self.padded_rows)
        kv = steps * prompts + len(prompt_lens) * steps * (steps + 1) / 2  # Σ decode_kv_tokens over k
        return steps * self.step_fixed_ms + self.step_ms_per_kv_token * kv

    def tokens_per_s(self, prompt_lens: Sequence[int], output_lens: Sequence[int]) -> float:
        return sum(output_lens) / (self.prefill_ms(prompt_lens) + self.decode_ms(prompt_lens, output_lens)) * 1000.0


def rising_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ys on xs (xs not all equal), or 0 where it falls: time never drops for more work."""
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    return max(0.0, sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs))


def padded_tokens(prompt_lens: Sequence[int]) -> int:
    """A static batch pads every prompt to its longest."""
    return len(prompt_lens) * max(prompt_lens)


def decode_kv_tokens(prompt_lens: Sequence[int], step_index: int, padded_rows: bool) -> int:
    """The KV tokens a static batch's decode step `step_index` (1 for the step after the prefill) attends to: every
    row's prompt, padded to the longest where the engine pads its rows (runners.spec.registry.static_rows_padded)
    or its own, plus the tokens made so far."""
    prompts = padded_tokens(prompt_lens) if padded_rows else sum(prompt_lens)
    return prompts + len(prompt_lens) * step_index


Lengths = Callable[[int], tuple[list[int], list[int]]]  # a draw's number → its prompt and output lengths


def host_draws(lengths: Lengths) -> list[tuple[list[int], list[int]]]:
    """The HOST_DRAWS draws the model is averaged over: drawn once a point, as its requests would be."""
    return [lengths(HOST_BASE + k) for k in range(HOST_DRAWS)]


@dataclass(frozen=True)
class StaticDraw:
    """What the model reads of one measured static batch: its lengths, prefill time, decode steps (step index: 1
    for the step after the prefill, ms) and throughput."""

    prompt_lens: list[int]
    output_lens: list[int]
    prefill_ms: float
    steps: list[tuple[int, float]]
    tokens_per_s: float


def static_interval(draws: Sequence[StaticDraw], host: Sequence[tuple[list[int], list[int]]],
                    padded_rows: bool) -> Interval:
    """The `model` method for a static point: each measured draw is predicted by the step model fitted to the
    point's other draws (held out, prefills and steps both, so a model that only fits its own draws shows as
    misses), and the model fitted to them all is averaged over the `host` draws (host_draws) and corrected by
    the held-out ratios. `padded_rows`: the engine's rows attend over the longest prompt (static_rows_padded)."""
    def fitted(used: Sequence[StaticDraw]) -> StepModel:
        steps = [[(decode_kv_tokens(d.prompt_lens, k, padded_rows), ms) for k, ms in d.steps] for d in used]
        return StepModel.fit([(padded_tokens(d.prompt_lens), d.prefill_ms) for d in used], steps, padded_rows)

    return held_out_interval(draws, fitted, lambda d: (d.prompt_lens, d.output_lens),
                             [d.tokens_per_s for d in draws], host, "model")


class Predicts(Protocol):
    """A fitted model: a draw's throughput from its requests (prompt lengths or arrivals, and output lengths)."""

    def tokens_per_s(self, requests: Sequence[Any], output_lens: Sequence[int]) -> float: ...


D = TypeVar("D")


def held_out_interval(draws: Sequence[D], fit: Callable[[Sequence[D]], Predicts],
                      requests: Callable[[D], tuple[Sequence[Any], Sequence[int]]], measured: Sequence[float],
                      host: Sequence[tuple[Sequence[Any], Sequence[int]]], method: str) -> Interval:
    """The control variate every model method shares (`model`, and `queue` in runners.metrics.open_loop): each
    measured draw predicted by the model `fit` to the other draws, the model fitted to them all averaged over the
    `host` draws, corrected by the held-out ratios (by_model)."""
    whole = fit(draws)
    held_out = [fit([*draws[:i], *draws[i + 1:]]) if len(draws) > 1 else whole for i in range(len(draws))]
    predicted = [model.tokens_per_s(*requests(d)) for model, d in zip(held_out, draws)]
    return by_model(measured, predicted, [whole.tokens_per_s(*drawn) for drawn in host], method)
