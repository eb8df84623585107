"""Issue 9's measurement: bfloat16 vs fp8 vs int8 weights in the fast engine, one command.

    python bench/quant.py [--model llama-3.1-8b] [--dtypes bfloat16,fp8,int8] [--batch-sizes pow2:1:512]
                          [--out DIR] [--deadline-s 560] [--repeats 2] [--warmup 1]

Runs one real sweep per dtype (`python -m runners sweep`, chat workload: prompts lognormal(512, 0.6),
outputs lognormal(256, 0.5), the demo runs' workload) — in parallel, one GPU each, when the host has
enough GPUs, else one after another on cuda:0. A sweep still running at the deadline gets SIGTERM,
which keeps its finished points, so the command ends inside a 10-minute limit with what was measured.
Then it writes DIR/quant.md (tables for docs/benchmarks.md) and DIR/quant.json: per dtype and batch the
decode step vs the roofline floor, throughput and the memory split; per dtype the knee markers and
the accuracy guard; fp8 and int8 batch-1 decode step as a share of bfloat16's (issue 14's bars: fp8 ≤ 0.6×, int8 ≤ 0.65×).
The run folders under DIR/runs/ import into History (overlay them there).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from batchscope.runfolder import RunFolder  # noqa: E402

CHAT = ["--prompt-len", "lognormal:512:0.6", "--output-len", "lognormal:256:0.5", "--seed", "0"]
GiB = 1024**3


def gpu_count() -> int:
    """CUDA devices the runner will see, without importing torch here (nvidia-smi lists them)."""
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in listed.splitlines() if line.startswith("GPU "))


def run_sweeps(args: argparse.Namespace, runs: Path) -> dict[str, Path]:
    """Launch every dtype's sweep (parallel over GPUs, in waves when there are fewer GPUs than dtypes)."""
    dtypes = args.dtypes.split(",")
    gpus = max(1, gpu_count())
    deadline = time.monotonic() + args.deadline_s
    folders = {d: runs / f"{args.model}-{d}-fast-chat" for d in dtypes}
    for wave in range(0, len(dtypes), gpus):
        procs = {}
        for gpu, dtype in enumerate(dtypes[wave:wave + gpus]):
            cmd = [sys.executable, "-m", "runners", "sweep", "--out", str(folders[dtype]), "--model", args.model,
                   "--dtype", dtype, "--engine", "fast", "--device", f"cuda:{gpu}", "--batch-sizes",
                   args.batch_sizes, "--repeats", str(args.repeats), "--warmup", str(args.warmup),
                   "--name", f"{args.model} {dtype} fast chat", *CHAT]
            print("$", " ".join(cmd), flush=True)
            procs[dtype] = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL)
        waves_left = -(-(len(dtypes) - wave) // gpus)
        wave_end = time.monotonic() + (deadline - time.monotonic()) / waves_left  # an equal share each
        for dtype, proc in procs.items():
            try:
                proc.wait(timeout=max(1.0, wave_end - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"{dtype}: deadline reached, stopping (finished points are kept)", flush=True)
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            print(f"{dtype}: exit {proc.returncode}", flush=True)
    return folders


def summarise(folder: Path) -> dict:
    """One dtype's table and markers, read back from its run folder the way the app reads it."""
    run = RunFolder(folder)
    rows = [run.read_point_table(i, "summary").to_pylist()[0] for i in run.complete_points()]
    model, calibration, status = run.model(), run.calibration(), run.status() or {}
    result = {"folder": str(folder), "state": status.get("state"), "error": status.get("error"),
              "model": model, "calibration": calibration, "points": [], "markers": {}}
    if not rows:
        return result
    from batchscope.analysis import analyse  # needs kneed, which the GPU image lacks: report there with --report-only

    analysis = analyse(pd.DataFrame(rows), model, calibration)
    cols = ["batch_size", "status", "decode_step_ms", "predicted_step_ms", "step_ratio", "output_tokens_per_s",
            "ttft_ms_p50", "itl_ms_p50", "mem_weights", "mem_kv_allocated", "mem_activations",
            "mem_allocator_reserve", "mem_other", "bound"]
    table = analysis.table[[c for c in cols if c in analysis.table]]
    result["points"] = json.loads(table.to_json(orient="records"))
    result["markers"] = {k: None if m is None else analysis.axis.value(m.x) for k, m in analysis.markers().items()}
    result["ridge_batch"] = analysis.ridge_batch
    return result


def fmt(value: object, scale: float = 1.0, digits: int = 2) -> str:
    return "–" if value is None or (isinstance(value, float) and value != value) else f"{value / scale:,.{digits}f}"


def markdown(results: dict[str, dict], model: str) -> str:
    lines = [f"# Quantised weights: {model}, fast engine, chat workload", ""]
    for dtype, r in results.items():
        m = r["model"] or {}
        checks = "; ".join(f"{c['rows']} rows {c['kernel']}: cosine {c['logits_cosine']:.4f}, agreement "
                           f"{c['token_agreement']:.0%}" for c in m.get("quant_accuracy") or []) or "–"
        lines += [f"## {dtype}", "",
                  f"state {r['state']}{' (' + r['error'] + ')' if r.get('error') else ''}; weights "
                  f"{fmt(m.get('weight_bytes'), GiB)} GiB; matmul ceiling "
                  f"{fmt((r['calibration'] or {}).get('matmul_flops_per_s'), 1e12, 0)} TFLOP/s "
                  f"({(r['calibration'] or {}).get('dtype')}); accuracy vs bfloat16 {checks}; markers {r['markers']}", "",
                  "| batch | status | decode ms | floor ms | × floor | out tok/s | TTFT p50 ms | weights GiB "
                  "| KV GiB | activations GiB | reserve GiB |", "|" + "---|" * 11]
        for p in r["points"]:
            lines.append(f"| {p['batch_size']} | {p['status']} | {fmt(p.get('decode_step_ms'))} | "
                         f"{fmt(p.get('predicted_step_ms'))} | {fmt(p.get('step_ratio'))} | "
                         f"{fmt(p.get('output_tokens_per_s'), digits=0)} | {fmt(p.get('ttft_ms_p50'), digits=0)} | "
                         f"{fmt(p.get('mem_weights'), GiB)} | {fmt(p.get('mem_kv_allocated'), GiB)} | "
                         f"{fmt(p.get('mem_activations'), GiB)} | {fmt(p.get('mem_allocator_reserve'), GiB)} |")
        lines.append("")
    lines += ["## Batch-1 decode step over bfloat16's", ""]
    lines += [f"- {line}" for line in speedups(results)]
    return "\n".join(lines) + "\n"


BARS = {"fp8": 0.6, "int8": 0.65}  # issue 14: the 8B batch-1 decode step at most this share of bfloat16's


def speedups(results: dict[str, dict]) -> list[str]:
    """decode_step_ms(dtype) / decode_step_ms(bfloat16) at batch 1, against issue 14's bars."""
    def step1(r: dict) -> float | None:
        return next((p["decode_step_ms"] for p in r["points"] if p["batch_size"] == 1 and p["status"] == "ok"), None)

    base = step1(results["bfloat16"]) if "bfloat16" in results else None
    out = []
    for dtype, r in results.items():
        step = step1(r)
        if dtype == "bfloat16" or base is None or step is None:
            continue
        bar = f" (bar: ≤ {BARS[dtype]}×)" if dtype in BARS else ""
        out.append(f"{dtype}: {step / base:.2f}× ({base:.2f} → {step:.2f} ms){bar}")
    return out or ["no batch-1 pair measured"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--dtypes", default="bfloat16,fp8,int8")
    ap.add_argument("--batch-sizes", default="pow2:1:512")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--deadline-s", type=float, default=560.0, help="SIGTERM sweeps still running after this")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-out")) / "quant")
    ap.add_argument("--report-only", action="store_true", help="re-read existing run folders, run nothing")
    args = ap.parse_args()
    runs = args.out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        folders = {d: runs / f"{args.model}-{d}-fast-chat" for d in args.dtypes.split(",")}
    else:
        folders = run_sweeps(args, runs)
    try:
        results = {d: summarise(f) for d, f in folders.items() if f.is_dir()}
    except ImportError as err:
        sys.exit(f"sweeps are in {runs}; the report needs {err.name}: bring the folder back and run "
                 f"`python bench/quant.py --report-only --out {args.out}` where BatchScope is installed")
    (args.out / "quant.json").write_text(json.dumps(results, indent=2, default=str))
    text = markdown(results, args.model)
    (args.out / "quant.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
