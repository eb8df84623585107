"""Re-make the shipped demo set (data/demo, issue 18) on a GPU host: every sweep by name, each with a time bound.

    python3 bench/demo_set.py OUT_DIR [NAME ...] [--deadline-s 540]   run (no NAME: the whole set, in order)
    python3 bench/demo_set.py --list                                  names, GPUs and time bounds
    python3 bench/demo_set.py --check FOLDER ...                      what each run folder made

Sweeps run one per GPU, side by side on a host with several (CUDA_VISIBLE_DEVICES gives each its own, so
telemetry and timing stay on that GPU); a two-GPU sweep (tensor parallel, replicas) waits for two free
GPUs. A sweep timed on the host clock (hf-generate, continuous batching) runs alone on the host: its step
is a Python loop, and host contention shows in it (hf-generate's 1B decode step: 10.7 ms with telemetry at
20 Hz, 14.6 ms at 1000 Hz).
A sweep starts only when its bound fits before the deadline, and gets SIGTERM at its bound, which
keeps its finished points (state cancelled): a demo run must end by itself (done, or stopped by OOM).
A run's folder is named for the card that measured it (`h200-NAME` on an H200, `h100-NAME` on an H100: the
name is the run's id in the app, so it must not claim a card it was not made on). A folder already `done` is
kept, so a later call goes on where an earlier one stopped: the whole set
takes about 80 minutes of one H200 (the two-GPU sweeps on a pair), in calls of at most 9 minutes each. Through
the device tool, OUT_DIR is `$OUT` itself: a run's `points` folder one level deeper does not come back.
Every sweep: seed 0, 3 measured repeats; the fast engine warms and captures every shape in setup, so it
runs no warm-up repeat; hf-generate has no setup and gets one. Imported into the app by copying the
folders into data/demo; `python bench/demo_table.py data/demo/h200-*` then gives the set's table for
docs/benchmarks.md and issue 37's bar.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from runners.cli import spec_of_options  # noqa: E402 - the repo root first, as `python3 bench/demo_set.py` runs
from runners.spec.sweep import DTYPE_SHORT  # noqa: E402

CHAT = ("--prompt-len", "lognormal:512:0.6", "--output-len", "lognormal:256:0.5")
LONG = ("--prompt-len", "lognormal:8192:0.3", "--output-len", "fixed:256")
COMMON = ("--repeats", "3", "--seed", "0")
FAST = ("--engine", "fast", "--warmup", "0")
# A static point draws until its throughput is known within ± 5 %. The 2026-12-05 H200 runs left 2 of 21 points
# short at six measured runs, both cheap ones (1B chat batch 2: ± 7.9 % after 5 draws; 1B long batch 16: ± 5.9 %);
# the model's t-interval shrinks as t95(n)/√n, so twelve runs take ± 7.9 % to about ± 4–5 %. Points that converge
# stop where they did, so only such points cost more (docs/benchmarks.md, eleventh session).
STATIC_DRAWS = ("--max-draws", "12")
CONTINUOUS = (*FAST, "--mode", "continuous", "--max-num-batched-tokens", "8192", "--slo-metric", "ttft",
              "--slo-ms", "1000")
MULTI_GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
MODELS = {"1b": "llama-3.2-1b", "8b": "llama-3.1-8b"}
# Closed-loop clients, two requests each from one 1 024-request workload, 512 slots; no replay (a point's draws
# carry its interval). A draw is rated while loaded (runners/metrics/loaded.py): rated over the wall, drain
# included, the draws read ±9–13 % at 4, 64 and 256 clients and the run outgrew its 520 s bound (docs/benchmarks.md,
# demo set v3); the 512-client point's draws take about 40 s each on an H200, so a point draws no more after 120 s
# (three draws at 512 clients, five at 256) and the sweep ends inside its bound whatever its draws' spread.
# The 2026-12-05 H200 run read ± 4.2–4.5 % at 16, 64 and 256 clients but ± 6.3 % at 512 after three draws of
# ≈ 40 s, in a 390 s sweep (docs/benchmarks.md): 150 s lets 512 take a fourth draw, ≈ 430 s in all.
CLIENTS_LOAD = ("--max-num-seqs", "512", "--requests-per-client", "2", "--num-requests", "1024", "--replays", "0",
                "--point-budget-s", "150")
SERVED_PORT = 8771
SERVED_URL = f"http://127.0.0.1:{SERVED_PORT}/v1"


@dataclass(frozen=True)
class Sweep:
    """One demo run: its name (the folder is CARD-NAME), label, runner options, time bound and GPUs."""

    name: str
    label: str
    options: tuple[str, ...]
    bound_s: int
    gpus: int = 1
    env: dict[str, str] = field(default_factory=dict)
    alone: bool = False  # timed on the host clock (hf-generate's Python loop, the continuous scheduler, a served
    # engine and its client): no neighbour


LAYOUTS = {  # suffix -> (runner options, label, GPUs)
    "": ((), "", 1),
    "tp2": (("--tensor-parallel", "2"), " · tensor parallel over 2 GPUs", 2),
    "rep2": (("--replicas", "2"), " · 2 replicas on 2 GPUs", 2),
}


def static(model: str, dtype: str, workload: str, batches: str, bound_s: int, layout: str = "") -> Sweep:
    """A static fast-engine sweep of one model, dtype and workload, on one GPU or two (`layout`)."""
    shape = {"chat": CHAT, "long": LONG}[workload]
    options, where, gpus = LAYOUTS[layout]
    short = DTYPE_SHORT.get(dtype, dtype)
    return Sweep(f"fast-{model}-{short}-{workload}{'-' + layout if layout else ''}",
                 f"{model.upper()} fast · {workload} · {short}{where}",
                 (*FAST, "--model", MODELS[model], "--dtype", dtype, "--batch-sizes", batches, *shape, *COMMON,
                  *STATIC_DRAWS, *options),
                 bound_s, gpus=gpus, env=MULTI_GPU_ENV if gpus > 1 else {})


def continuous(part: str, sweep_options: tuple[str, ...], bound_s: int, label: str) -> Sweep:
    return Sweep(f"cont-8b-bf16-chat-{part}", f"8B continuous · chat · bf16 · {label}",
                 (*CONTINUOUS, "--model", MODELS["8b"], "--dtype", "bfloat16", *CHAT, *COMMON, *sweep_options), bound_s,
                 alone=True)


def open_loop_draws(most: int) -> tuple[str, ...]:
    """Poisson arrivals: a draw is a new set of requests, whose lengths set its throughput (a replay repeats it
    within 0.01 %, docs/benchmarks.md). On the 2026-12-05 H200 draws of 64 requests spread ≈ 5–6 % and of 128
    requests ≈ 5 % at 16 slots, which the `queue` method's model of the slots predicts within 1.5 % (docs/trust.md):
    128 requests a draw, no replay (the budget goes to draws), at most `most` draws where the model misses."""
    return ("--num-requests", "128", "--replays", "0", "--max-draws", str(most))


def served(concurrency: str, bound_s: int) -> Sweep:
    """The clients sweep's load at a few of its concurrencies, sent to `runners serve` over HTTP: the served
    twin of the in-process run (same requests, slots and step budget). The runner restarts the server before
    each point (`--server-command`), with slots as long as the workload's longest request."""
    options = ("--engine", "endpoint", "--mode", "endpoint", "--url", SERVED_URL, "--model", MODELS["8b"],
               "--dtype", "bfloat16", "--warmup", "0", "--max-num-batched-tokens", "8192", "--slo-metric", "ttft",
               "--slo-ms", "1000", *CHAT, *COMMON, *CLIENTS_LOAD, "--concurrency", concurrency)
    spec = spec_of_options(options)
    server = (f"{shlex.quote(sys.executable)} -m runners serve --model {MODELS['8b']} --dtype bfloat16 --seed 0 "
              f"--port {SERVED_PORT} --max-num-seqs {{max_num_seqs}} --max-num-batched-tokens "
              f"{{max_num_batched_tokens}} --max-model-len {spec.longest_request(spec.num_requests)}")
    return Sweep("served-8b-bf16-chat", "8B runners serve · chat · bf16 · concurrency, over HTTP",
                 (*options, "--server-command", server), bound_s, alone=True)


# In priority order: the static case, the continuous engine up to 512 clients, the static contrast, then serving,
# quantised weights, the served engine, two GPUs, the rest.
SET = [
    static("8b", "bfloat16", "chat", "pow2:1:1024", 330),
    continuous("clients", (*CLIENTS_LOAD, "--concurrency", "1,4,16,64,256,512"), 520, "concurrency 1…512, 512 slots"),
    Sweep("hf-1b-bf16-chat", "1B hf-generate · chat · bf16",
          ("--engine", "hf-generate", "--warmup", "1", "--model", MODELS["1b"], "--dtype", "bfloat16",
           "--batch-sizes", "1,4,16,64", *CHAT, *COMMON), 530, alone=True),
    static("1b", "bfloat16", "chat", "pow2:1:1024", 220),
    continuous("seqs", ("--max-num-seqs", "16,32,128", "--arrival", "poisson:8", *open_loop_draws(8)), 480,
               "max_num_seqs at 8 req/s"),
    # A draw's 128 requests arrive over 32, 16, 11 and 8 s at 4…16 req/s; a point stops at three draws where the
    # queue model meets ± 5 % (docs/trust.md). 530 s (was 540) fits a call of nine minutes.
    continuous("rate", ("--max-num-seqs", "64", "--arrival", "poisson:4,8,12,16", *open_loop_draws(6)), 530,
               "arrival rate, 64 slots"),
    static("8b", "fp8", "chat", "pow2:1:1024", 330),
    static("8b", "int8", "chat", "pow2:1:1024", 330),
    served("1,16,64,256", 520),
    static("8b", "bfloat16", "chat", "1,4,16,64,256,1024", 260, layout="tp2"),
    static("8b", "bfloat16", "chat", "2,4,16,64,256,1024", 260, layout="rep2"),
    static("8b", "bfloat16", "long", "pow2:1:1024", 200),
    static("1b", "bfloat16", "long", "pow2:1:1024", 180),  # 124 s at six runs a point; twelve add ≈ 19 s at batch 16
    static("8b", "float16", "chat", "1,4,16,64,256,1024", 170),
    static("1b", "float16", "chat", "1,4,16,64,256,1024", 140),
    static("8b", "float16", "long", "1,4,16,64,256,1024", 170),
    static("1b", "float16", "long", "1,4,16,64,256,1024", 100),
]
BY_NAME = {sweep.name: sweep for sweep in SET}


def folder_state(folder: Path) -> str | None:
    status = folder / "status.json"
    if not status.is_file():
        return None
    import json

    return json.loads(status.read_text()).get("state")


def launch(sweep: Sweep, folder: Path, gpus: list[int]) -> subprocess.Popen:
    if folder.exists():
        subprocess.run(["rm", "-rf", str(folder)], check=True)
    env = {**os.environ, **sweep.env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "runners", "sweep", "--out", str(folder), "--name", sweep.label, *sweep.options]
    print(f"{time.strftime('%H:%M:%S')} start {sweep.name} on GPU {env['CUDA_VISIBLE_DEVICES']} "
          f"(bound {sweep.bound_s} s)", flush=True)
    log = open(folder.parent / f"{sweep.name}.out", "w")  # noqa: SIM115 - closed with the process below
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM (the runner keeps its finished points), then a kill if it does not end."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_set(sweeps: list[Sweep], out: Path, gpu_count: int, deadline_s: float, card: str) -> None:
    """Greedy in order over the GPUs: start each sweep whose GPUs are free and whose bound fits before the
    deadline; a two-GPU or host-alone sweep that cannot start yet holds back the ones behind it (no
    starvation), and nothing starts beside a host-alone sweep. Folders are `card`-NAME."""
    out.mkdir(parents=True, exist_ok=True)
    end = time.monotonic() + deadline_s
    folder = {s.name: out / f"{card}-{s.name}" for s in sweeps}
    pending = [s for s in sweeps if folder_state(folder[s.name]) != "done"]
    for s in sweeps:
        if s not in pending:
            print(f"keep {s.name}: already done", flush=True)
    running: dict[str, tuple[Sweep, subprocess.Popen, list[int], float]] = {}
    free = list(range(gpu_count))
    while pending or running:
        for s in list(pending):
            if s.gpus > gpu_count:
                print(f"skip {s.name}: needs {s.gpus} GPUs, this host has {gpu_count}", flush=True)
                pending.remove(s)
                continue
            if any(r.alone for r, *_ in running.values()):
                break  # the host belongs to a sweep timed on its clock
            if s.bound_s > end - time.monotonic():
                continue  # a shorter one further down may still fit
            if s.gpus > len(free) or (s.alone and running):
                if s.gpus > 1 or s.alone:
                    break
                continue
            gpus, free = free[:s.gpus], free[s.gpus:]
            running[s.name] = (s, launch(s, folder[s.name], gpus), gpus, time.monotonic())
            pending.remove(s)
        if not running:
            for s in pending:
                print(f"not started {s.name}: its bound ({s.bound_s} s) does not fit before the deadline", flush=True)
            break
        time.sleep(1)
        for name, (s, proc, gpus, started) in list(running.items()):
            if proc.poll() is None and time.monotonic() - started > s.bound_s:
                print(f"{time.strftime('%H:%M:%S')} {name}: bound reached, SIGTERM", flush=True)
                stop(proc)
            if proc.poll() is not None:
                print(f"{time.strftime('%H:%M:%S')} end {name}: exit {proc.returncode} after "
                      f"{time.monotonic() - started:.0f} s", flush=True)
                free = sorted(free + gpus)
                del running[name]
    for line in check([folder[s.name] for s in sweeps]):
        print(line, flush=True)


def check(folders: list[Path]) -> list[str]:
    """One line per run folder: state, the points measured along its axis, failed points, most outlier steps."""
    import json

    import pyarrow.parquet as pq

    lines = []
    for folder in folders:
        state = folder_state(folder)
        if state is None:
            lines.append(f"{folder.name}: not made")
            continue
        rows = [pq.read_table(p).to_pylist()[0] for p in sorted((folder / "points").glob("p*.summary.parquet"))]
        axis = next((r["sweep_axis"] for r in rows if r.get("sweep_axis")), "batch_size")
        at = {(r["sweep_value"] if r.get("sweep_axis") else r.get("batch_size")): r for r in rows}
        ok = [x for x, r in at.items() if r.get("status") == "ok"]
        failed = [f"{x}: {r.get('status')}" for x, r in at.items() if r.get("status") != "ok"]
        counts = [r["outlier_steps"] for r in rows if r.get("status") == "ok" and r.get("outlier_steps") is not None]
        outliers = f"≤ {max(counts)}" if counts else "not counted"
        status = json.loads((folder / "status.json").read_text())
        took = f"{status.get('started_at', '')[11:19]}–{(status.get('finished_at') or '')[11:19]}"
        lines.append(f"{folder.name}: {state}, {len(ok)} ok ({axis} {ok}), {'; '.join(failed) or 'no failed point'}, "
                     f"outlier steps {outliers}, {took}")
    return lines


def gpus_here() -> list[str]:
    """The names of this host's GPUs, without importing torch (`nvidia-smi -L` lists them)."""
    try:
        return gpu_names(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout)
    except (OSError, subprocess.TimeoutExpired):
        return []


def gpu_names(listing: str) -> list[str]:
    """Each GPU's name from `nvidia-smi -L` ("GPU 0: NVIDIA H200 (UUID: GPU-…)"); MIG lines are not GPUs."""
    return [m.group(1) for m in re.finditer(r"^GPU \d+: (.+?)(?: \(UUID: [^)]*\))?$", listing, re.MULTILINE)]


def card_of(gpu_name: str) -> str:
    """A folder prefix for the card: its model number ("NVIDIA H100 80GB HBM3" → h100, "NVIDIA A100-SXM4-80GB" →
    a100), else the whole name in lower case with dashes."""
    number = re.search(r"\b([A-Z]\d{2,4})\b", gpu_name)
    return number.group(1).lower() if number else re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("out", nargs="?", type=Path, help="folder for the run folders (CARD-NAME each: h200-NAME)")
    ap.add_argument("names", nargs="*", help="sweeps to make, in this order (default: the whole set)")
    ap.add_argument("--deadline-s", type=float, default=540.0, help="start nothing whose bound ends after this")
    ap.add_argument("--list", action="store_true", help="print the set and exit")
    ap.add_argument("--check", nargs="+", type=Path, metavar="FOLDER", help="describe run folders and exit")
    args = ap.parse_args()
    if args.list:
        for s in SET:
            print(f"{s.name:28} {s.gpus} GPU{' alone' if s.alone else '      '}  ≤{s.bound_s:4d} s  {s.label}")
        return
    if args.check:
        print("\n".join(check(args.check)))
        return
    if args.out is None:
        ap.error("give OUT_DIR, --list or --check")
    unknown = [n for n in args.names if n not in BY_NAME]
    if unknown:
        ap.error(f"unknown sweep(s) {', '.join(unknown)}; --list shows the set")
    sweeps = [BY_NAME[n] for n in args.names] if args.names else SET
    gpus = gpus_here()
    if not gpus:
        sys.exit("no GPU here (nvidia-smi lists none): the demo set is measured on an H200")
    if len(set(gpus)) > 1:
        sys.exit(f"this host mixes cards ({', '.join(sorted(set(gpus)))}): a run's folder names one card")
    run_set(sweeps, args.out, len(gpus), args.deadline_s, card_of(gpus[0]))


if __name__ == "__main__":
    main()
