"""Markdown tables of bench/multi_gpu.sh's runs: per batch throughput, latency and the all-reduce share
of the decode step, then where each run's knee falls (for docs/benchmarks.md)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pyarrow.parquet as pq

COLUMNS = ("batch_size", "status", "output_tokens_per_s", "requests_per_s", "decode_step_ms", "comm_ms_per_step",
           "comm_share", "ttft_ms_p50", "itl_ms_p50", "itl_ms_p95", "e2e_ms_p95", "mem_peak_allocated",
           "gpu_util_pct", "power_w", "energy_per_output_token_j")
GAIN = 0.10  # batchscope.analysis.knee.plateau's default: a doubling that adds < 10 % no longer pays


def cell(value) -> str:
    if value is None:
        return ""
    return f"{value:,.4g}" if isinstance(value, float) else str(value)


def knee(rows: list[dict]) -> str:
    """The plateau rule (without the app's noise check, which needs its spread columns): the
    smallest batch after which every doubling adds less than GAIN throughput."""
    ok = [r for r in rows if r["status"] == "ok"]
    if len(ok) < 2:
        return "needs two ok points"
    gains = [(b["output_tokens_per_s"] / a["output_tokens_per_s"]) ** (1 / math.log2(b["batch_size"] / a["batch_size"])) - 1
             for a, b in zip(ok, ok[1:])]
    start = len(ok) - 1
    while start > 0 and gains[start - 1] < GAIN:
        start -= 1
    if start == len(ok) - 1:
        return f"none: still +{gains[-1]:.0%} per doubling at batch {ok[-1]['batch_size']}"
    return f"batch {ok[start]['batch_size']} ({ok[start]['output_tokens_per_s']:,.0f} tok/s)"


def main(root: Path) -> None:
    for run in sorted(p for p in root.iterdir() if (p / "points").is_dir()):
        env = json.loads((run / "env.json").read_text()) if (run / "env.json").exists() else {}
        rows = [pq.read_table(p).to_pylist()[0] for p in sorted((run / "points").glob("*.summary.parquet"))]
        rows.sort(key=lambda r: r["batch_size"])
        print(f"\n### {run.name}: tensor_parallel {env.get('tensor_parallel')}, replicas {env.get('replicas')}, "
              f"{env.get('gpu_count')} × {env.get('gpu')}, topology {env.get('topology')}\n")
        print(f"| {' | '.join(COLUMNS)} |\n|{'---|' * len(COLUMNS)}")
        for row in rows:
            print("| " + " | ".join(cell(row.get(c)) for c in COLUMNS) + " |")
        print(f"\nKnee (plateau rule, {GAIN:.0%} per doubling): {knee(rows)}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "data/runs/bench-multi-gpu"))
