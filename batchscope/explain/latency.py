"""Explain step 2, per-request latency: TTFT and ITL at the chosen percentile from the smallest to the
largest batch, the token rate a user sees, why P95 and P99 may tie, and outlier steps."""
from __future__ import annotations

from typing import Any

import pandas as pd

from batchscope.analysis.marker import num
from batchscope.explain.words import measured, moves, times, value, with_clause
from batchscope.units import ms
from runners.spec.continuous import requests_per_point
from runners.spec.registry import schedules_slots

def latency_sentences(table: pd.DataFrame, percentile: int = 95, run: dict[str, Any] | None = None
                      ) -> tuple[str, str]:
    """TTFT and ITL at the chosen percentile at the smallest and largest batch, and the token rate a user
    at that percentile sees (1000 / ITL); how many requests a tied percentile rests on, and outlier steps."""
    ttft_col, itl_col, p = f"ttft_ms_p{percentile}", f"itl_ms_p{percentile}", f"P{percentile}"
    ttft = measured(table, ttft_col)
    if ttft.empty:
        first = "This run recorded no time to first token (TTFT), so its growth with the batch cannot be shown."
    elif len(ttft) == 1:
        first = f"{p} time to first token (TTFT) is {ms(ttft.iloc[0][ttft_col])} at batch " \
                f"{int(ttft.iloc[0]['batch_size'])}, the only finished batch."
    else:
        a, z = ttft.iloc[0], ttft.iloc[-1]
        va, vz = float(a[ttft_col]), float(z[ttft_col])
        first = (f"{p} time to first token (TTFT) {moves(va, vz)} from {ms(va)} at batch {int(a['batch_size'])} to "
                 f"{ms(vz)} at batch {int(z['batch_size'])}"
                 + (f" ({times(vz / va)}): a request's first token waits for the prefill of the whole batch."
                    if vz > va else "."))
    tie = tied_percentile_words(ttft, percentile, run or {})
    first = with_clause(first, tie) if tie else first
    itl = measured(table, itl_col)
    outliers = outlier_words(table)
    if itl.empty:
        second = "This run recorded no inter-token latency (ITL), so the token rate each user sees is unknown."
        return first, with_clause(second, outliers) if outliers else second
    a, z = itl.iloc[0], itl.iloc[-1]
    va, vz = float(a[itl_col]), float(z[itl_col])
    if len(itl) == 1:
        second = (f"{p} inter-token latency (ITL) is {ms(va)} at batch {int(a['batch_size'])}: each user "
                  f"receives about {num(1000 / va)} tokens/s (1000 / ITL).")
    else:
        second = (f"{p} inter-token latency (ITL) {moves(va, vz)} from {ms(va)} at batch {int(a['batch_size'])} to "
                  f"{ms(vz)} at batch {int(z['batch_size'])}, so each user's stream goes from about "
                  f"{num(1000 / va)} to {num(1000 / vz)} tokens/s (1000 / ITL).")
    return first, with_clause(second, outliers) if outliers else second


def requests_at(point: pd.Series, run: dict[str, Any]) -> int | None:
    """How many requests a point's latency percentiles rest on: the point's `latency_requests` where recorded,
    else (a run made before it) batch × repeats for a static point and the requests its spec served per repeat ×
    repeats for a continuous one; None when the repeats were not recorded."""
    counted = value(point, "latency_requests")
    if counted is not None:
        return int(counted)
    repeats = value(point, "repeats")
    if repeats is None or repeats < 1:
        return None
    spec = run.get("spec") or {}
    clients = value(point, "concurrency")
    per_repeat = (requests_per_point(int(spec.get("num_requests") or 0), int(spec.get("requests_per_client") or 0),
                                     int(clients) if clients else None)
                  if schedules_slots(spec.get("mode")) else point["batch_size"])
    return int(per_repeat) * int(repeats) if per_repeat else None


def tied_percentile_words(points: pd.DataFrame, percentile: int, run: dict[str, Any]) -> str:
    """Where P95 and P99 TTFT are the same number, why: how few requests the higher one rests on (it is then
    the slowest request) or, in a static batch, that its rows share one prefill. Empty when they differ (or,
    for a continuous run with 100 requests or more, when neither reason holds)."""
    if percentile not in (95, 99):
        return ""
    column, other = f"ttft_ms_p{percentile}", f"ttft_ms_p{ {95: 99, 99: 95}[percentile]}"
    if other not in points:
        return ""
    tied = points[(pd.to_numeric(points[other], errors="coerce") - points[column]).abs() <= 1e-6 * points[column]]
    counted = [(row, n) for _, row in tied.iterrows() if (n := requests_at(row, run)) is not None]
    if not counted:
        return ""
    batches = ", ".join(str(int(row["batch_size"])) for row, _ in counted)
    few = [found for found in counted if found[1] < 100]  # then P99 has under one request beyond it
    row, n = max(few, key=lambda found: found[1]) if few else min(counted, key=lambda found: found[1])
    static = not schedules_slots((run.get("spec") or {}).get("mode"))
    if n < 100:
        why = f"P99 of {n} requests is simply the slowest one"
    elif static:
        why = f"even with {n} requests, the rows of one static batch share one prefill, so its slowest requests tie"
    else:
        return ""
    per = f"{int(row['batch_size'])} × {int(row['repeats'])} repeats" if static else f"{int(row['repeats'])} repeats"
    return (f"P95 and P99 TTFT are the same at batch {batches}: at batch {int(row['batch_size'])} they rest on "
            f"{n} requests ({per}), and {why}")


def outlier_words(table: pd.DataFrame) -> str:
    """Which points had measured decode steps over 5× their like steps, and how many; empty when none."""
    found = measured(table, "outlier_steps")
    found = found[found["outlier_steps"] > 0]
    if found.empty:
        return ""
    listed = " and ".join(f"{int(row['outlier_steps'])} at batch {int(row['batch_size'])}" for _, row in found.iterrows())
    return (f"{listed} measured decode step(s) took over 5× the median of like steps (a compile, autotune or "
            f"allocation), which the tail of its ITL includes")