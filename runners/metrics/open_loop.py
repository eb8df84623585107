"""An open-loop continuous point's throughput as an expectation over its workload (docs/trust.md, "Measuring until
known"): the `queue` method.

At a fixed arrival rate a draw's throughput follows its requests: on the H200 (8B, 8 req/s, 128 requests a draw)
one point's draws spread 5–10 %, so ± 5 % from draws alone needs more draws than a sweep can afford. How the
GPU serves them repeats, though: a FIFO queue in front of `max_num_seqs` slots, each request holding its slot
for a prefill and then one inter-token gap per further token, predicts each of those draws' tokens in the
load window within 1.5 % (docs/trust.md, the open-loop worked example). So, as the static model does
(runners.metrics.interval), the point's figure is the model's mean over host draws corrected by the measured
draws' ratio to their held-out predictions, and its interval says how well the model predicts a draw it has
not seen.
"""
from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from runners.engines.scheduler import poisson_arrival_s
from runners.metrics.interval import HOST_BASE, HOST_DRAWS, Interval, held_out_interval
from runners.metrics.repeat import Row
from runners.spec import SweepSpec
from runners.workload.workload import arrival_seed

METHOD = "queue"


@dataclass(frozen=True)
class OpenLoopDraw:
    """What the model reads of one measured draw: each request's arrival and output length, the prefill and
    mean inter-token gap it was served with, and the draw's throughput while loaded."""

    arrival_ms: list[float]
    output_lens: list[int]
    prefill_ms: list[float]  # first token − admission: the prefill, its wait for a slot left out
    itl_ms: list[float]  # each request's mean gap; a one-token request has none
    tokens_per_s: float


def open_loop_draw(requests: Sequence[Row], repeat: Row) -> OpenLoopDraw:
    """A measured continuous repeat as the model reads it."""
    return OpenLoopDraw([r["arrival_ms"] for r in requests], [r["output_len"] for r in requests],
                        [r["ttft_ms"] - r["queue_ms"] for r in requests],
                        [r["itl_ms_mean"] for r in requests if r["itl_ms_mean"] is not None],
                        repeat["output_tokens_per_s"])


@dataclass(frozen=True)
class SlotModel:
    """Requests served first come, first served by `slots` rows: one waits for the earliest slot to free, makes
    its first token `prefill_ms` after it gets one, then one token every `itl_ms`, and frees its slot with its
    last token (the scheduler's rule, runners.engines.scheduler)."""

    slots: int
    prefill_ms: float
    itl_ms: float

    @classmethod
    def fit(cls, draws: Sequence[OpenLoopDraw], slots: int) -> SlotModel:
        """Medians over every request of the draws: hundreds of them, which one draw barely moves."""
        gaps = [g for d in draws for g in d.itl_ms]
        return cls(slots, statistics.median(p for d in draws for p in d.prefill_ms),
                   statistics.median(gaps) if gaps else 0.0)

    def first_tokens_ms(self, arrival_ms: Sequence[float], output_lens: Sequence[int]) -> list[float]:
        """Each request's first token, in the order given."""
        free = [0.0] * self.slots  # when each slot frees
        firsts = [0.0] * len(arrival_ms)
        for i in sorted(range(len(arrival_ms)), key=lambda k: arrival_ms[k]):
            first = max(arrival_ms[i], heapq.heappop(free)) + self.prefill_ms
            heapq.heappush(free, first + (output_lens[i] - 1) * self.itl_ms)
            firsts[i] = first
        return firsts

    def tokens_per_s(self, arrival_ms: Sequence[float], output_lens: Sequence[int]) -> float:
        """Rated as the runner rates a measured draw (runners.metrics.loaded, repeat.repeat_row): the tokens made
        after the first token and up to the last arrival, over that window; where it holds none (every request
        in before a token), every token over the wall from the draw's start to its last token."""
        firsts = self.first_tokens_ms(arrival_ms, output_lens)
        start, end = min(firsts), max(arrival_ms)
        made = sum(tokens_between(first, count, self.itl_ms, start, end) for first, count in zip(firsts, output_lens))
        if made:
            return made / ((end - start) / 1e3)
        wall_ms = max(first + (count - 1) * self.itl_ms for first, count in zip(firsts, output_lens))
        return sum(output_lens) / (wall_ms / 1e3)


def tokens_between(first_ms: float, count: int, gap_ms: float, start_ms: float, end_ms: float) -> int:
    """How many of `count` tokens made at first_ms, first_ms + gap_ms, … fall in (start_ms, end_ms]."""
    if gap_ms <= 0:
        return count if start_ms < first_ms <= end_ms else 0
    lowest = 0 if first_ms > start_ms else math.floor((start_ms - first_ms) / gap_ms) + 1
    highest = min(count - 1, math.floor((end_ms - first_ms) / gap_ms)) if end_ms >= first_ms else -1
    return max(0, highest - lowest + 1)


def host_draws(spec: SweepSpec, rate: float, served: int) -> list[tuple[list[float], list[int]]]:
    """HOST_DRAWS draws of an open-loop point's workload as the engine would be sent them: the `served` first
    requests' arrivals in ms (the seeded Poisson process) and output lengths. The model reads no prompt: its
    prefill is a median."""
    return [([t * 1e3 for t in poisson_arrival_s(served, rate, arrival_seed(spec, HOST_BASE + k))],
             spec.request_lengths(spec.num_requests, HOST_BASE + k)[1][:served]) for k in range(HOST_DRAWS)]


def open_loop_interval(draws: Sequence[OpenLoopDraw], slots: int,
                       host: Sequence[tuple[list[float], list[int]]]) -> Interval:
    """The `queue` method: the slot model's held-out control variate (interval.held_out_interval) over the `host`
    draws (arrivals in ms, output lengths)."""
    return held_out_interval(draws, lambda used: SlotModel.fit(used, slots), lambda d: (d.arrival_ms, d.output_lens),
                             [d.tokens_per_s for d in draws], host, METHOD)
