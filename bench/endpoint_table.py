"""Markdown tables of bench/endpoint_vs_inprocess.sh, one per workload: per concurrency, output tok/s
in-process and through `runners serve` (and their ratio: the bar is ≥ 0.90), TTFT and ITL P50 of both, and
the served TTFT's P50 part by part (runners.results.schemas.TTFT_PARTS: the client's dispatch, uplink, the server's
parsing, the wait for the step in flight, the scheduler's queue, prefill, flush, downlink), with the clock
offset's error. With several repeats a point's TTFT P50 is also given per repeat (lowest–highest of the
repeats' own P50s, from the requests' rows), so a gap between the sides can be read against each side's
spread between runs of the same requests. Each point also gets the TTFT mean over all its requests and the P45–P55
range around its P50: where a closed loop of equal requests splits them into those that wait for one packed prefill and
those that wait for two, the P50 sits on the edge between the two waits, P45–P55 spans the gap, and a few ms of client
turnaround moves the P50 across it while the mean stays put (docs/benchmarks.md, issue 36, fifth session).

Reads run folders named `inprocess-<workload>-*` and `served-<workload>-*` with pyarrow only (the GPU host
has no DuckDB). Usage: endpoint_table.py OUT_DIR
"""
from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.metrics.stats import percentile
from runners.results import contract
from runners.results.schemas import TTFT_PARTS

PART_NAMES = [part.removeprefix("ttft_").removesuffix("_ms") for part in TTFT_PARTS]


def summaries(out: Path, side: str, workload: str | None = None) -> dict[int, dict]:
    """Point summaries of one side's sweeps (of one workload, where a folder names several), by concurrency;
    each row also says its run folder (`folder`)."""
    rows = {}
    for path in sorted(out.glob(f"{side}-{workload + '-' if workload else ''}*/points/*.summary.parquet")):
        row = pq.read_table(path).to_pylist()[0]
        rows[row["concurrency"] or row["batch_size"]] = {**row, "folder": path.parent.parent}
    return rows


def ttfts_by_repeat(row: dict | None) -> dict[int, list[float]]:
    """One point's request TTFTs (ms) by repeat, from its requests' rows: those its percentiles count (every one
    in a folder made before `latency_counted`); failed requests (no TTFT) left out, nothing for a side that has no
    such point."""
    by_repeat: dict[int, list[float]] = {}
    path = None if row is None else row["folder"] / "points" / contract.point_file(row["point_index"], "requests")
    if path is not None and path.is_file():
        for request in pq.read_table(path).to_pylist():
            if request["ttft_ms"] is not None and request.get("latency_counted") is not False:
                by_repeat.setdefault(request["repeat"], []).append(request["ttft_ms"])
    return dict(sorted(by_repeat.items()))


def spread(by_repeat: dict[int, list[float]]) -> str:
    """'lowest–highest' of a point's per-repeat TTFT P50s; '—' with fewer than two repeats."""
    p50s = [percentile(ttfts, 50) for ttfts in by_repeat.values()]
    return f"{min(p50s):,.1f}–{max(p50s):,.1f}" if len(p50s) > 1 else "—"


def mean_and_edge(by_repeat: dict[int, list[float]]) -> tuple[str, str]:
    """A point's TTFT mean over all its requests and its 'P45–P55': a wide range says the P50 sits on a gap."""
    ttfts = [t for repeat in by_repeat.values() for t in repeat]
    if not ttfts:
        return "—", "—"
    return f"{sum(ttfts) / len(ttfts):,.1f}", f"{percentile(ttfts, 45):,.1f}–{percentile(ttfts, 55):,.1f}"


def cell(row: dict | None, key: str, digits: int = 1) -> str:
    if row is None:
        return "—"
    if row["status"] != "ok":
        return row["status"]
    value = row.get(key)
    return "—" if value is None else f"{value:,.{digits}f}"


def table(out: Path, workload: str) -> list[str]:
    local, served = summaries(out, "inprocess", workload), summaries(out, "served", workload)
    lines = [f"### {workload}", "",
             "| concurrency | out tok/s in / served | served / in | TTFT P50 in / served ms | "
             "TTFT P50 per repeat in / served ms | TTFT mean in / served ms | TTFT P45–P55 in / served ms | "
             "ITL P50 in / served ms | "
             + " | ".join(PART_NAMES) + " | clock ± ms | failed requests |",
             "|---" * (10 + len(PART_NAMES)) + "|"]
    for c in sorted(set(local) | set(served)):
        a, b = local.get(c), served.get(c)
        ok = a is not None and b is not None and a["status"] == b["status"] == "ok"
        ratio = f"{b['output_tokens_per_s'] / a['output_tokens_per_s']:.3f}" if ok else "—"
        parts = " | ".join(cell(b, f"{part}_p50", 2) for part in TTFT_PARTS)
        ttfts_a, ttfts_b = ttfts_by_repeat(a), ttfts_by_repeat(b)  # each requests file read once
        (mean_a, edge_a), (mean_b, edge_b) = mean_and_edge(ttfts_a), mean_and_edge(ttfts_b)
        lines.append(f"| {c} | {cell(a, 'output_tokens_per_s')} / {cell(b, 'output_tokens_per_s')} | {ratio} | "
                     f"{cell(a, 'ttft_ms_p50')} / {cell(b, 'ttft_ms_p50')} | "
                     f"{spread(ttfts_a)} / {spread(ttfts_b)} | {mean_a} / {mean_b} | {edge_a} / {edge_b} | "
                     f"{cell(a, 'itl_ms_p50', 2)} / "
                     f"{cell(b, 'itl_ms_p50', 2)} | {parts} | {cell(b, 'clock_error_ms', 3)} | "
                     f"{(b or {}).get('error') or 'none'} |")
    return lines + [""]


def main(out: Path) -> None:
    workloads = sorted({p.name.split("-")[1] for p in [*out.glob("served-*-*"), *out.glob("inprocess-*-*")]})
    print("Served TTFT parts: P50 in ms of each (they add up to each request's TTFT, not the P50s to its P50).\n")
    for workload in workloads:
        print("\n".join(table(out, workload)))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
