"""Markdown table of every finished point under a bench/continuous.sh output folder (for docs/benchmarks.md)."""
from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq

COLUMNS = ("sweep_axis", "sweep_value", "batch_size", "status", "output_tokens_per_s", "requests_per_s",
           "goodput_rps", "queue_ms_p50", "ttft_ms_p50", "ttft_ms_p95", "ttft_ms_p99", "itl_ms_p50",
           "itl_ms_p95", "itl_ms_p99", "e2e_ms_p50", "e2e_ms_p95", "kv_occupancy_max", "decode_padding_waste")


def cell(value) -> str:
    if value is None:
        return ""
    return f"{value:,.4g}" if isinstance(value, float) else str(value)


def main(root: Path) -> None:
    for run in sorted(p for p in root.iterdir() if (p / "points").is_dir()):
        print(f"\n### {run.name}\n\n| {' | '.join(COLUMNS)} |\n|{'---|' * len(COLUMNS)}")
        for path in sorted((run / "points").glob("*.summary.parquet")):
            row = pq.read_table(path).to_pylist()[0]
            print("| " + " | ".join(cell(row.get(c)) for c in COLUMNS) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "data/runs/bench-continuous"))
