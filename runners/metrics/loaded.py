"""Output throughput while the load is applied: from the first token made to the last request's arrival
(docs/design.md §2, "Throughput while loaded").

A continuous or endpoint repeat ends with a drain: once the last request has arrived, in-flight requests
finish one by one at ever fewer in flight, and the slowest of them sets the wall time: a rate over the
wall reads that tail as well as C requests in flight (256 closed-loop clients with two requests each read
± 9.2 % after six draws on an H200, docs/benchmarks.md, demo set v3). Counting only the tokens made while
requests still arrive reads the load the point is labelled with.

Latency percentiles count the requests that arrived inside that window (`counts`), the drain's included: they
arrived while the load was on. Left out are those that arrived before the first token, which in a closed loop is
the whole first round: every client sends at the repeat's start, so C requests queue for prefill together. On an
H200 (8B, 512 clients, two requests each) that round's P95 TTFT was 8.7 s against 131 ms for the second round,
and with two rounds the point's P95 was the first round's: a synchronised start, not the steady load. The same
reason as GuideLLM's warm-up share, with its edge set by the load rather than by a fraction.

A continuous point's decode step, and the active rows and KV tokens its roofline floor is computed from, are
over its decode-only steps that ended inside the window (`step_counts`): the steps whose tokens the throughput
counts, at the load the point is labelled with. Its utilisation means are over the telemetry samples taken inside
the window (runners.metrics.utilisation), for the same reason.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

# What a continuous or endpoint run's throughput is rated over, in its env.json (`throughput_basis`): a run made
# before this rated the whole wall and records none, so the regression check never compares the two.
BASIS = "load window"
# What its latency percentiles count, in env.json (`latency_basis`): a run made before this counted every request.
LATENCY_BASIS = "arrivals in the load window"
# What a continuous run's decode step and active rows are over, in env.json (`step_basis`): a run made before this
# took the decode step over every decode-only step, the drain's included, and the active rows over every step.
STEP_BASIS = "decode-only steps that ended in the load window"
# What a continuous or endpoint run's utilisation means are over, in env.json (`util_basis`): a run made before this
# took them over every sample inside the measured repeats, the drain's included.
UTIL_BASIS = "samples in the load window"


@dataclass(frozen=True)
class Loaded:
    """The load's window (ms from the repeat's start) and the output tokens made inside it."""

    start_ms: float
    end_ms: float
    output_tokens: int

    @property
    def ms(self) -> float:
        return self.end_ms - self.start_ms

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / (self.ms / 1e3)

    def made_inside(self, t_ms: float) -> bool:
        """Whether a token made (or a step ended) at t_ms is the window's: after its start, up to its end."""
        return self.start_ms < t_ms <= self.end_ms


def loaded(arrivals_ms: Sequence[float], token_ms: Sequence[Sequence[float]]) -> Loaded | None:
    """Tokens made after the first token and up to the last arrival (a token made at that moment counts):
    the output of the steps that ran while requests still arrived. None when no token came before the last
    request arrived (a load sent at once, as C clients with one request each: the whole wall is the load's),
    or when the requests all arrived within one step of the first token (a burst: no step ended inside the
    window, whose rate would read 0 tok/s while the engine was making tokens)."""
    firsts = [times[0] for times in token_ms if times]
    if not arrivals_ms or not firsts:
        return None
    window = Loaded(min(firsts), max(arrivals_ms), 0)
    made = sum(window.made_inside(t) for times in token_ms for t in times)  # none when end <= start
    return replace(window, output_tokens=made) if made else None


def from_row(row: dict) -> Loaded | None:
    """The load window a repeat row records (runners.metrics.repeat.repeat_row); None for a static batch, a load
    sent at once, or a row written before windows were recorded."""
    if row.get("loaded_start_ms") is None:
        return None
    return Loaded(row["loaded_start_ms"], row["loaded_end_ms"], row["loaded_output_tokens"])


def counts(arrival_ms: float, load: Loaded | None) -> bool:
    """Whether a request's latency counts in its point's percentiles: it arrived inside the load window (ends
    included), or its repeat has no window (a load sent at once: then every request is the load)."""
    return load is None or load.start_ms <= arrival_ms <= load.end_ms


def step_counts(step: dict, load: Loaded | None) -> bool:
    """Whether a step's time counts in its point's decode step: it ended inside the load window, as the tokens
    the throughput counts did, or its repeat has no window. A closed loop drains after its last arrival with
    ever fewer rows in flight, and under the load most steps carry a prefill chunk: at 512 clients on an
    H200, 487 of 5 356 decode-only steps ended under the load (docs/design.md, "A continuous point's decode
    step"), so a median over all of them read the drain."""
    return load is None or load.made_inside(step["start_ms"] + step["duration_ms"])
