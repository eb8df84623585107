"""Markdown table of bench/endpoint_vs_inprocess.sh: per concurrency, output tok/s in-process and through
`runners serve` (and their ratio: the bar is within 10 %), TTFT and ITL P50 of both, and the HTTP overhead
(client − the server engine's own time, from the server's --timings log) at the median.

Reads run folders with pyarrow only (the GPU host has no DuckDB). Usage: endpoint_table.py OUT_DIR
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pyarrow.parquet as pq


def summaries(out: Path, side: str) -> dict[int, dict]:
    """Point summaries of a side's sweeps by concurrency."""
    rows = {}
    for path in sorted(out.glob(f"{side}-*/points/*.summary.parquet")):
        row = pq.read_table(path).to_pylist()[0]
        rows[row["concurrency"] or row["batch_size"]] = row
    return rows


def overheads(out: Path) -> dict[int, tuple[float, float]]:
    """Median (TTFT, E2E) overhead in ms per concurrency: the client's time minus the server engine's."""
    engine = {}
    timings = out / "timings.jsonl"
    for line in timings.read_text().splitlines() if timings.exists() else []:
        record = json.loads(line)
        engine[record["user"]] = record
    found: dict[int, tuple[list[float], list[float]]] = {}
    for path in sorted(out.glob("served-*/points/*.requests.parquet")):
        run = path.parents[1].name
        for row in pq.read_table(path).to_pylist():
            own = engine.get(f"{run}/p{row['point_index']}/r{row['repeat']}/{row['request_index']}")
            if own is None:
                continue
            ttft, e2e = found.setdefault(row["batch_size"], ([], []))
            ttft.append(row["ttft_ms"] - (own["tokens"][0] - own["received"]) * 1e3)
            e2e.append(row["e2e_ms"] - (own["tokens"][-1] - own["received"]) * 1e3)
    return {c: (statistics.median(t), statistics.median(e)) for c, (t, e) in found.items()}


def cell(row: dict | None, key: str, digits: int = 1) -> str:
    if row is None:
        return "—"
    if row["status"] != "ok":
        return row["status"]
    value = row.get(key)
    return "—" if value is None else f"{value:,.{digits}f}"


def main(out: Path) -> None:
    local, served, extra = summaries(out, "inprocess"), summaries(out, "served"), overheads(out)
    print("| concurrency | in-process out tok/s | served out tok/s | served / in-process | TTFT P50 in / served ms "
          "| ITL P50 in / served ms | HTTP overhead TTFT / E2E ms (median) | failed requests |")
    print("|---|---|---|---|---|---|---|---|")
    for c in sorted(set(local) | set(served)):
        a, b = local.get(c), served.get(c)
        ok = a is not None and b is not None and a["status"] == b["status"] == "ok"
        ratio = f"{b['output_tokens_per_s'] / a['output_tokens_per_s']:.3f}" if ok else "—"
        over = extra.get(c)
        print(f"| {c} | {cell(a, 'output_tokens_per_s')} | {cell(b, 'output_tokens_per_s')} | {ratio} | "
              f"{cell(a, 'ttft_ms_p50')} / {cell(b, 'ttft_ms_p50')} | {cell(a, 'itl_ms_p50', 2)} / "
              f"{cell(b, 'itl_ms_p50', 2)} | {f'{over[0]:.2f} / {over[1]:.2f}' if over else '—'} | "
              f"{(b or {}).get('error') or 'none'} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
