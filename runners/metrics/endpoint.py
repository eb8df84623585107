"""Endpoint metrics: request and repeat rows from what the client saw of each streamed request, and the
point's summary (the base summary, goodput, requests in flight, and its failed requests counted).

A server's steps are not visible from outside, so an endpoint point has no step rows; its latencies are
the client's, from each request's arrival to the chunks' arrival, so they include the HTTP path. Where the
server tells its own times (`runners serve`'s server_timing), a request's TTFT is split at every timestamp
into TTFT_PARTS, which add up to it exactly; the clock offset's error moves time only between the uplink
and downlink parts (the server's stamps all shift together), so it is the summary's `clock_error_ms`.
"""
from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from runners.engines.endpoint import SERVER_STAMPS, Outcome, Served
from runners.engines.sse import token_times
from runners.metrics import summary
from runners.metrics.loaded import counts, loaded
from runners.metrics.repeat import Repeat, repeat_row, request_row
from runners.metrics.stats import percentile
from runners.results.schemas import TTFT_PARTS


@dataclass
class EndpointRepeat(Repeat):
    goodput_rps: float  # requests that finished and met the SLO ÷ wall time
    in_flight: float  # mean requests in flight: their summed time from send to end ÷ wall time
    sent: int
    failed: Counter  # failure kind → requests
    first_failure: str | None  # the first failed request's kind and text
    clock_error_ms: float | None  # ± on the server's clock offset; None: the server tells no clock


def endpoint_repeat(point_index: int, repeat: int, batch_size: int, served: Served, prompt_lens: list[int],
                    output_lens: list[int], slo_metric: str, slo_ms: float) -> EndpointRepeat:
    """One repeat as rows. A request's prompt and generated lengths are the server's counts (usage) where
    it gave them, else the drawn prompt and the chunks received; its `output_len` is the drawn length it
    asked for, so a server that ended a request early (its length not forced) shows as `generated_len`
    under it, and throughput counts the tokens generated while requests arrived (runners.metrics.loaded).
    Raises RuntimeError when no request finished."""
    base = {"point_index": point_index, "repeat": repeat, "batch_size": batch_size}
    rows, itl = [], []
    clock = served.clock
    met = 0
    failed: Counter = Counter(o.error for o in served.outcomes if o.error is not None)
    first = next((f"{o.error}: {o.detail}" if o.detail else o.error for o in served.outcomes if o.error), None)
    finished = [o for o in served.outcomes if o.error is None]
    made = [[t * 1e3 for t in token_times(o.chunk_s, o.completion_tokens or len(o.chunk_s))] for o in finished]
    load = loaded([o.arrival_s * 1e3 for o in served.outcomes], made)
    # the window's end may be a failed request's arrival: if no finished request arrived inside it, every
    # finished one counts, as in a load with no window, rather than leave the point without latencies
    latency_load = load if any(counts(o.arrival_s * 1e3, load) for o in finished) else None
    for o, ms in zip(finished, made):
        gaps = [b - a for a, b in zip(ms, ms[1:])]
        arrival = o.arrival_s * 1e3
        prompt = o.prompt_tokens if o.prompt_tokens is not None else prompt_lens[o.index]
        row = request_row(base, o.index, prompt, output_lens[o.index], None, ms[0] - arrival, ms[-1] - arrival,
                          gaps, arrival_ms=arrival, load=latency_load)
        if row["latency_counted"]:
            itl.extend(gaps)
        row.update(ttft_parts(o))
        value = row["itl_ms_mean"] if slo_metric == "itl" else row[f"{slo_metric}_ms"]
        met += value is None or value <= slo_ms
        rows.append(row)
    if not rows:
        raise RuntimeError(f"all {len(served.outcomes)} requests failed: {failure_text(failed, len(served.outcomes), first)}")
    wall_ms = served.end_s * 1e3
    row = repeat_row(base, wall_ms, None, None, sum(r["generated_len"] for r in rows),
                     sum(r["prompt_len"] for r in rows), len(rows), load)
    in_flight = sum(o.end_s - o.sent_s for o in served.outcomes) / served.end_s
    return EndpointRepeat(rows, [], row, itl, met / (wall_ms / 1e3), in_flight, len(served.outcomes), failed, first,
                          None if clock is None else clock.error_s * 1e3)


def ttft_parts(o: Outcome) -> dict[str, float | None]:
    """A finished request's TTFT_PARTS in ms: the gaps between its arrival, the client's send, each of the
    server's stamps (SERVER_STAMPS) and the client's first token chunk; all null without the server's."""
    if not o.server:
        return dict.fromkeys(TTFT_PARTS)
    times = [o.arrival_s, o.sent_s, *(o.server[k] for k in SERVER_STAMPS), o.chunk_s[0]]
    return {part: (b - a) * 1e3 for part, a, b in zip(TTFT_PARTS, times, times[1:])}


def failure_text(failed: Counter, sent: int, first: str | None) -> str:
    """`3 of 192 requests failed: HTTP 500 ×2, timeout ×1 (first: HTTP 500: ...)`."""
    kinds = ", ".join(f"{kind} ×{n}" for kind, n in failed.most_common())
    return f"{sum(failed.values())} of {sent} requests failed: {kinds}" + (f" (first: {first})" if first else "")


def summarise(point_index: int, batch_size: int, repeats: Sequence[EndpointRepeat], warmup: int, slo_metric: str,
              slo_ms: float) -> summary.Summary:
    """The base summary over the finished requests; `error` counts the measured repeats' failed requests
    (the point is still ok: the server answered the rest)."""
    out = summary.base(point_index, batch_size, repeats, warmup, "perf_counter")
    failed: Counter = sum((rep.failed for rep in repeats), Counter())
    first = next((rep.first_failure for rep in repeats if rep.first_failure), None)
    out.update(
        output_len_mean=statistics.fmean(r["generated_len"] for rep in repeats for r in rep.requests),
        outlier_steps=None,  # the server's steps are not seen from outside
        active_seqs_mean=statistics.fmean(rep.in_flight for rep in repeats),
        goodput_rps=statistics.median(rep.goodput_rps for rep in repeats),
        goodput_slo=f"{slo_metric}<={slo_ms:g}ms",
        error=failure_text(failed, sum(rep.sent for rep in repeats), first) if failed else None)
    requests = summary.counted(repeats)  # the requests whose TTFT the parts split
    out.update(**{f"{part}_p50": percentile([r[part] for r in requests if r[part] is not None], 50)
                  for part in TTFT_PARTS})
    errors = [rep.clock_error_ms for rep in repeats if rep.clock_error_ms is not None]
    out.update(clock_error_ms=max(errors) if errors else None)
    return out
