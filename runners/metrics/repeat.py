"""One measured repeat in the shape every mode produces (static, continuous, replicated): its request,
step and repeat rows for the point files, and every inter-token gap for the ITL percentiles."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from runners.metrics.loaded import Loaded, counts
from runners.metrics.stats import percentile

Row = dict[str, Any]


@dataclass
class Repeat:
    requests: list[Row]  # runners.results.schemas DETAIL["requests"] rows
    steps: list[Row]  # DETAIL["steps"] rows
    row: Row  # the DETAIL["repeats"] row
    itl: list[float]  # every gap between two tokens of a request whose latency counts (loaded.counts), in ms


def request_row(base: Row, index: int, prompt_len: int, output_len: int, queue_ms: float | None, ttft_ms: float,
                e2e_ms: float, gaps: list[float], *, arrival_ms: float, load: Loaded | None) -> Row:
    """A request's row; `gaps` are its inter-token times (none for a one-token request), so the tokens
    the engine delivered to it (`generated_len`, against the requested `output_len`) are one more. It arrived
    `arrival_ms` after its repeat's start; `load` is that repeat's load window (None: a batch sent at once)."""
    return {**base, "request_index": index, "prompt_len": prompt_len, "output_len": output_len,
            "queue_ms": queue_ms, "ttft_ms": ttft_ms, "e2e_ms": e2e_ms,
            "itl_ms_mean": statistics.fmean(gaps) if gaps else None, "itl_ms_p95": percentile(gaps, 95),
            "generated_len": len(gaps) + 1, "arrival_ms": arrival_ms, "latency_counted": counts(arrival_ms, load)}


def repeat_row(base: Row, wall_ms: float, prefill_ms: float | None, decode_ms: float | None, output_tokens: int,
               input_tokens: int, requests: int, load: Loaded | None = None) -> Row:
    """A repeat's totals and its rates over the wall time (prefill and decode time None where unseen: a
    server's); with `load` (requests that arrive over time), output tokens/s is the rate while it was applied."""
    wall_s = wall_ms / 1e3
    return {**base, "wall_ms": wall_ms, "prefill_ms": prefill_ms, "decode_ms": decode_ms,
            "output_tokens": output_tokens, "input_tokens": input_tokens,
            "output_tokens_per_s": load.output_tokens_per_s if load else output_tokens / wall_s,
            "input_tokens_per_s": input_tokens / wall_s, "requests_per_s": requests / wall_s,
            "loaded_start_ms": load.start_ms if load else None, "loaded_end_ms": load.end_ms if load else None,
            "loaded_output_tokens": load.output_tokens if load else None}
