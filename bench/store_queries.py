"""Store benchmark: the History and Run pages' queries against a DB of 1,000 runs.

    python bench/store_queries.py [--runs 1000] [--iterations 7] [--db PATH] [--json PATH]

Fills a fresh DuckDB file through the Store's own write path (upsert_run + add_point, the calls
ingest makes) with synthetic sweeps: 10 points per run at batch 1..512, one repeat, so the requests
table holds sum(batch sizes) = 1,023 rows per run (≈ 1M rows for 1,000 runs); 64 steps and 100
telemetry samples per point. Then times each page's reads as the pages make them, each page visit
in a new thread (Streamlit runs every rerun on a new thread, so every visit pays for a new cursor).
Prints one Markdown table per page; target: each page's total under 300 ms.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batchscope.store import Store  # noqa: E402

BATCH_SIZES = [2 ** i for i in range(10)]
STEPS_PER_POINT = 64
SAMPLES_PER_POINT = 100
MODELS = ["llama-3.2-1b", "llama-3.1-8b", "qwen2.5-7b", "mistral-7b"]
GPUS = ["NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]
OVERLAY_RUNS = 10  # the History page's most runs overlaid at once (history_view.MAX_OVERLAY)


def _point_tables(rng: np.random.Generator, index: int, batch: int) -> tuple[pa.Table, dict[str, pa.Table]]:
    i32 = pa.int32()
    step_ms = 8.0 + 0.02 * batch
    summary = pa.table({
        "point_index": pa.array([index], i32), "batch_size": pa.array([batch], i32), "status": ["ok"],
        "repeats": pa.array([1], i32), "warmup": pa.array([1], i32), "prompt_len_mean": [256.0],
        "output_len_mean": [64.0], "prefill_ms": [0.1 * batch + 5], "decode_step_ms": [step_ms],
        "ttft_ms_p50": [0.1 * batch + 5], "itl_ms_p95": [step_ms * 1.1], "e2e_ms_p95": [step_ms * 64],
        "output_tokens_per_s": [batch * 1000 / step_ms * rng.uniform(0.95, 1.05)],
        "mem_weights": pa.array([16_000_000_000], pa.int64()),
        "mem_kv_allocated": pa.array([batch * 320 * 131_072], pa.int64()),
        "gpu_util_pct": [rng.uniform(60, 100)], "timing": ["cuda_events"], "util_source": ["nvml,gpm"],
    })
    requests = pa.table({
        "point_index": pa.array(np.full(batch, index), i32), "repeat": pa.array(np.zeros(batch), i32),
        "request_index": pa.array(np.arange(batch), i32), "batch_size": pa.array(np.full(batch, batch), i32),
        "prompt_len": pa.array(np.full(batch, 256), i32), "output_len": pa.array(np.full(batch, 64), i32),
        "queue_ms": np.zeros(batch), "ttft_ms": rng.normal(0.1 * batch + 5, 0.5, batch),
        "e2e_ms": rng.normal(step_ms * 64, 1.0, batch), "itl_ms_mean": rng.normal(step_ms, 0.1, batch),
        "itl_ms_p95": rng.normal(step_ms * 1.1, 0.1, batch),
    })
    steps = pa.table({
        "point_index": pa.array(np.full(STEPS_PER_POINT, index), i32),
        "repeat": pa.array(np.zeros(STEPS_PER_POINT), i32),
        "step_index": pa.array(np.arange(STEPS_PER_POINT), i32),
        "phase": ["prefill"] + ["decode"] * (STEPS_PER_POINT - 1),
        "start_ms": np.arange(STEPS_PER_POINT) * step_ms, "duration_ms": rng.normal(step_ms, 0.1, STEPS_PER_POINT),
        "active_seqs": pa.array(np.full(STEPS_PER_POINT, batch), i32),
        "active_tokens": pa.array(batch * (256 + np.arange(STEPS_PER_POINT)), pa.int64()),
        "batch_rows": pa.array(np.full(STEPS_PER_POINT, batch), i32),
    })
    samples = pa.table({
        "t_s": index * 10 + np.arange(SAMPLES_PER_POINT) * 0.05,
        "point_index": pa.array(np.full(SAMPLES_PER_POINT, index), i32),
        "repeat": pa.array(np.zeros(SAMPLES_PER_POINT), i32), "phase": ["decode"] * SAMPLES_PER_POINT,
        "gpu_util_pct": rng.uniform(50, 100, SAMPLES_PER_POINT), "power_w": rng.uniform(300, 700, SAMPLES_PER_POINT),
        "mem_used_bytes": pa.array(np.full(SAMPLES_PER_POINT, 40_000_000_000), pa.int64()),
        "source": ["nvml"] * SAMPLES_PER_POINT,
    })
    repeats = pa.table({
        "point_index": pa.array([index], i32), "repeat": pa.array([0], i32), "batch_size": pa.array([batch], i32),
        "wall_ms": [step_ms * 64], "output_tokens_per_s": summary["output_tokens_per_s"].to_pylist(),
    })
    return summary, {"requests": requests, "steps": steps, "samples": samples, "repeats": repeats}


def fill(store: Store, runs: int, seed: int = 0) -> list[str]:
    """Write `runs` synthetic finished sweeps; returns their ids, oldest first."""
    rng = np.random.default_rng(seed)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    run_ids = []
    for n in range(runs):
        created = start + timedelta(hours=7 * n)
        run_id = f"{created:%Y%m%d-%H%M%S}-bench-{n:06x}"
        spec = {"model": MODELS[n % len(MODELS)], "dtype": "bfloat16" if n % 3 else "float16",
                "engine": "fast" if n % 2 else "hf-generate", "mode": "static", "batch_sizes": BATCH_SIZES,
                "repeats": 1, "name": f"bench run {n}", "created_at": created.isoformat()}
        status = {"state": "done", "run_id": run_id, "pid": 1000 + n, "points_done": 10, "points_total": 10,
                  "started_at": created.isoformat(), "finished_at": (created + timedelta(minutes=5)).isoformat()}
        gpu = GPUS[n % len(GPUS)]
        env = {"device": "cuda:0", "gpu": gpu, "driver": "570.86", "cuda": "12.8", "torch": "2.13.0",
               "transformers": "5.24.0", "python": "3.11.7", "host": "bench", "engine": spec["engine"]}
        calibration = {"device": gpu, "dtype": spec["dtype"], "copy_bytes_per_s": 4.0e12,
                       "matmul_flops_per_s": 9.0e14, "source": "measured", "key": f"{gpu}|570.86|{spec['dtype']}"}
        store.upsert_run(run_id, f"/bench/{run_id}", spec, status, env, {"params": 8_000_000_000}, calibration)
        for index, batch in enumerate(BATCH_SIZES):
            summary, details = _point_tables(rng, index, batch)
            store.add_point(run_id, index, summary, details)
        run_ids.append(run_id)
    return run_ids


def history_page(store: Store, run_ids: list[str]) -> list[tuple[str, Callable[[], object]]]:
    """app_pages/history.py: every run, the filtered list, then up to 10 runs overlaid (run + points each)."""
    overlay = run_ids[-OVERLAY_RUNS:]
    queries: list[tuple[str, Callable[[], object]]] = [
        ("runs()", store.runs),
        ("runs(model, gpu, since, until)", lambda: store.runs(model=[MODELS[1]], gpu=[GPUS[0]],
                                                              since=datetime(2026, 3, 1), until=datetime(2026, 9, 1))),
    ]
    queries += [(f"run(id) × {len(overlay)}", lambda: [store.run(rid) for rid in overlay]),
                (f"points([id]) × {len(overlay)}", lambda: [store.points([rid]) for rid in overlay]),
                (f"repeats({len(overlay)} ids)", lambda: store.repeats(overlay))]
    return queries


def run_page(store: Store, run_id: str) -> list[tuple[str, Callable[[], object]]]:
    """app_pages/run.py: the run picker, the run and its points, then its detail tables."""
    return [
        ("runs()", store.runs),
        ("run(id)", lambda: store.run(run_id)),
        ("points([id])", lambda: store.points([run_id])),
        ("repeats([id])", lambda: store.repeats([run_id])),
        ("calibration(key)", lambda: store.calibration(f"{GPUS[0]}|570.86|bfloat16")),
        ("requests(id)", lambda: store.requests(run_id)),
        ("requests(id, point)", lambda: store.requests(run_id, 9)),
        ("steps(id)", lambda: store.steps(run_id)),
        ("samples(id)", lambda: store.samples(run_id)),
    ]


def time_page(queries: list[tuple[str, Callable[[], object]]], iterations: int) -> dict[str, list[float]]:
    """Milliseconds per query per visit; each visit on a fresh thread, after one unmeasured visit."""
    timings: dict[str, list[float]] = {name: [] for name, _ in queries}

    def visit(record: bool) -> None:
        for name, query in queries:
            began = time.perf_counter()
            query()
            if record:
                timings[name].append((time.perf_counter() - began) * 1000)

    for visit_number in range(iterations + 1):
        thread = threading.Thread(target=visit, args=(visit_number > 0,))
        thread.start()
        thread.join()
    return timings


def markdown(title: str, timings: dict[str, list[float]]) -> str:
    lines = [f"**{title}**", "", "| query | median ms | max ms |", "|---|---:|---:|"]
    for name, values in timings.items():
        lines.append(f"| `{name}` | {statistics.median(values):.1f} | {max(values):.1f} |")
    totals = [sum(values[i] for values in timings.values()) for i in range(len(next(iter(timings.values()))))]
    lines.append(f"| **page total** | **{statistics.median(totals):.1f}** | **{max(totals):.1f}** |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=7)
    parser.add_argument("--db", type=Path, help="where to build the DB (default: a temp dir, deleted after)")
    parser.add_argument("--json", type=Path, help="also write the raw timings here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        db = args.db or Path(scratch) / "bench.duckdb"
        if db.exists():
            sys.exit(f"{db} exists; the benchmark builds a fresh DB")
        with Store(db) as store:
            began = time.perf_counter()
            run_ids = fill(store, args.runs)
            fill_s = time.perf_counter() - began
        with duckdb.connect(str(db), read_only=True) as con:
            counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                      for t in ("runs", "points", "requests", "steps", "samples")}
        size_mb = db.stat().st_size / 1e6
        with Store(db) as store:  # reopened, as the app finds it after a restart
            pages = {"History page": time_page(history_page(store, run_ids), args.iterations),
                     "Run page": time_page(run_page(store, run_ids[len(run_ids) // 2]), args.iterations)}

    print(f"{datetime.now(timezone.utc):%Y-%m-%d} · {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores · Python {platform.python_version()} · DuckDB {duckdb.__version__} · "
          f"pandas {pd.__version__} · pyarrow {pa.__version__}")
    print(f"Filled {counts} in {fill_s:.0f} s through Store.add_point ({fill_s / counts['points'] * 1000:.1f} ms "
          f"per point); file {size_mb:.0f} MB.\n")
    for title, timings in pages.items():
        print(markdown(title, timings) + "\n")
    if args.json:
        args.json.write_text(json.dumps({"counts": counts, "fill_s": fill_s, "pages": pages}, indent=2))


if __name__ == "__main__":
    main()
