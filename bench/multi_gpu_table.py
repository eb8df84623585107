"""Markdown tables of bench/multi_gpu.sh's runs: per batch throughput, latency, the all-reduce time and
share of the decode step (beside the standalone probe's time for the same shapes), each GPU's mean
utilisation and peak memory, then where each run's knee falls (for docs/benchmarks.md)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pyarrow.parquet as pq

COLUMNS = ("batch_size", "status", "output_tokens_per_s", "requests_per_s", "decode_step_ms", "comm_ms_per_step",
           "probe_ms", "comm_vs_probe", "comm_share", "ttft_ms_p95", "itl_ms_p50", "itl_ms_p95", "e2e_ms_p95",
           "util_pct_per_gpu", "mem_gib_per_gpu", "energy_per_output_token_j")
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


def per_gpu(summary: Path) -> dict[str, str]:
    """Each GPU's mean utilisation and peak used memory over the samples inside the point's measured
    repeats (the summary's rule), GPU 0 first."""
    samples = summary.with_name(summary.name.replace(".summary.", ".samples."))
    if not samples.exists():
        return {}
    rows = [r for r in pq.read_table(samples).to_pylist() if r.get("gpu_index") is not None and r["repeat"] >= 0]
    gpus = sorted({r["gpu_index"] for r in rows})
    util = [sum(r["gpu_util_pct"] for r in rows if r["gpu_index"] == g) / sum(r["gpu_index"] == g for r in rows) for g in gpus]
    mem = [max(r["mem_used_bytes"] for r in rows if r["gpu_index"] == g) / 2**30 for g in gpus]
    return {"util_pct_per_gpu": " / ".join(f"{u:.0f}" for u in util), "mem_gib_per_gpu": " / ".join(f"{m:.1f}" for m in mem)}


def main(root: Path) -> None:
    probe_file = root / "allreduce.json"
    probe = {r["batch"]: r["ms_per_step"] for r in json.loads(probe_file.read_text())["rows"]} if probe_file.exists() else {}
    for run in sorted(p for p in root.iterdir() if (p / "points").is_dir()):
        env = json.loads((run / "env.json").read_text()) if (run / "env.json").exists() else {}
        rows = []
        for path in sorted((run / "points").glob("*.summary.parquet")):
            row = {**pq.read_table(path).to_pylist()[0], **per_gpu(path)}
            if row.get("comm_ms_per_step") and row["batch_size"] in probe:
                row.update(probe_ms=probe[row["batch_size"]], comm_vs_probe=row["comm_ms_per_step"] / probe[row["batch_size"]])
            rows.append(row)
        rows.sort(key=lambda r: r["batch_size"])
        print(f"\n### {run.name}: tensor_parallel {env.get('tensor_parallel')}, replicas {env.get('replicas')}, "
              f"{env.get('gpu_count')} × {env.get('gpu')}, topology {env.get('topology')}\n")
        print(f"| {' | '.join(COLUMNS)} |\n|{'---|' * len(COLUMNS)}")
        for row in rows:
            print("| " + " | ".join(cell(row.get(c)) for c in COLUMNS) + " |")
        print(f"\nKnee (plateau rule, {GAIN:.0%} per doubling): {knee(rows)}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "data/runs/bench-multi-gpu"))
