"""A point's summary row: only runners.results.schemas.SUMMARY's columns can be set, so a misspelled key fails
where it is written instead of becoming a silent null column. `base` fills the columns every mode
shares; each mode's metrics module adds its own."""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from runners.metrics.outliers import outlier_steps
from runners.metrics.repeat import Repeat, Row
from runners.metrics.stats import percentile
from runners.results.schemas import PERCENTILES, SUMMARY

COLUMNS = frozenset(SUMMARY.names)


class Summary:
    """SUMMARY's columns by name; a column never set reads (and is written) as null."""

    def __init__(self, **values: Any) -> None:
        self._values: dict[str, Any] = {}
        self.update(**values)

    def update(self, **values: Any) -> None:
        unknown = sorted(set(values) - COLUMNS)
        if unknown:
            raise KeyError(f"not summary columns (runners/results/schemas.py SUMMARY): {', '.join(unknown)}")
        self._values.update(values)

    def __getitem__(self, name: str) -> Any:
        if name not in COLUMNS:
            raise KeyError(f"not a summary column: {name}")
        return self._values.get(name)

    @property
    def ok(self) -> bool:
        return self["status"] == "ok"

    def row(self) -> Row:
        """Every column in schema order, as the summary file holds it."""
        return {name: self._values.get(name) for name in SUMMARY.names}


def failed(point_index: int, batch_size: int, status: str, err: BaseException, warmup: int) -> Summary:
    """The summary of a point that ran out of memory or failed: its status and the error's first line."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return Summary(point_index=point_index, batch_size=batch_size, status=status,
                   error=f"{type(err).__name__}: {text}", repeats=0, warmup=warmup)


def base(point_index: int, batch_size: int, repeats: Sequence[Repeat], warmup: int, timing: str) -> Summary:
    """The columns every mode computes alike: request lengths, rates over repeats, TTFT/ITL/E2E percentiles
    over the requests whose latency counts (`counted`), and outlier steps. Which steps are the point's decode
    steps is each mode's to say (`decode`)."""
    requests = [r for rep in repeats for r in rep.requests]
    latency = counted(repeats)
    summary = Summary(
        point_index=point_index, batch_size=batch_size, status="ok", error=None, repeats=len(repeats),
        warmup=warmup, prompt_len_mean=statistics.fmean(r["prompt_len"] for r in requests),
        output_len_mean=statistics.fmean(r["output_len"] for r in requests),
        timing=timing, outlier_steps=outlier_steps([s for rep in repeats for s in rep.steps]),
        latency_requests=len(latency),
        **_rates([rep.row for rep in repeats]))
    itl = [x for rep in repeats for x in rep.itl]
    for p in PERCENTILES:
        summary.update(**{f"ttft_ms_p{p}": percentile([r["ttft_ms"] for r in latency], p),
                          f"e2e_ms_p{p}": percentile([r["e2e_ms"] for r in latency], p),
                          f"itl_ms_p{p}": percentile(itl, p)})
    return summary


def counted(repeats: Sequence[Repeat]) -> list[Row]:
    """The requests a point's latency percentiles are over: those that arrived inside their repeat's load
    window (runners.metrics.loaded.counts; every request of a batch sent at once)."""
    return [r for rep in repeats for r in rep.requests if r["latency_counted"]]


def _rates(rows: list[Row]) -> dict[str, float]:
    """Rates over a point's repeats: medians, plus the output rate's min–max spread the knee rule reads."""
    tput = [r["output_tokens_per_s"] for r in rows]
    prefill = [r["input_tokens"] / r["prefill_ms"] * 1000.0 for r in rows if r["prefill_ms"]]  # none: a server's
    return {
        "output_tokens_per_s": statistics.median(tput), "output_tokens_per_s_min": min(tput),
        "output_tokens_per_s_max": max(tput),
        "input_tokens_per_s": statistics.median(r["input_tokens_per_s"] for r in rows),
        "prefill_tokens_per_s": statistics.median(prefill) if prefill else None,
        "requests_per_s": statistics.median(r["requests_per_s"] for r in rows),
    }


def decode(steps: list[Row]) -> dict[str, float | None]:
    """The decode step's time (median, P95) and the rows still generating and KV tokens they hold, over the same
    steps: the roofline floors that time with the bytes those rows read (batchscope.analysis.roofline), so a
    floor taken over other steps than the time can read above the time it bounds."""
    step_ms = [s["duration_ms"] for s in steps]
    return {"decode_step_ms": percentile(step_ms, 50), "decode_step_ms_p95": percentile(step_ms, 95),
            "active_seqs_mean": statistics.fmean(s["active_seqs"] for s in steps) if steps else None,
            "active_tokens_mean": statistics.fmean(s["active_tokens"] for s in steps) if steps else None,
            "active_tokens_max": max((s["active_tokens"] for s in steps), default=None)}
