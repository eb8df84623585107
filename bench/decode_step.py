"""The paged engine's decode step on a GPU, taken apart: where a 256-row step of the chat workload goes.

Issue 32 measured the 8B step at 256 decoding rows of the chat sweep on the host clock (16.5 ms, step end
to step end: the scheduler's host work included) against 10.1 ms of weight + own-KV bytes at the copy
rate. This script times the same step without the host: the continuous engine's own captured graph of
width 256, replayed with CUDA events over 256 rows whose lengths are drawn as the chat workload's running
rows are (prompt lognormal:512:0.6 plus a uniform share of an output lognormal:256:0.5), their blocks
handed out shuffled. It splits the replay's GPU time by kernel (torch.profiler) into weight matmuls, paged
attention and the rest, and puts each beside its floor: weight bytes or matmul FLOPs (whichever is
longer: at 256 rows a weight matmul is past the ridge), the rows' own K/V bytes, measured rates.

    python3 bench/decode_step.py [--model llama-3.1-8b] [--rows 256] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import matmul_params  # noqa: E402  (bench/engine.py)
from runners.engines.continuous import ContinuousEngine  # noqa: E402
from runners.engines.fast import FastEngine  # noqa: E402
from runners.engines.kernels.quant_kernels import replay_times_ms  # noqa: E402
from runners.engines.models import load  # noqa: E402
from runners.telemetry.calibrate import calibrate  # noqa: E402
from runners.workload import distributions  # noqa: E402

REPLAYS = 50
KINDS = (("attention", ("_partial", "_merge")), ("matmul", ("gemm", "nvjet", "cutlass", "sm90", "xmma")))


def running_lengths(rows: int, seed: int = 0) -> list[int]:
    """Context lengths of `rows` running chat requests: a prompt plus a uniform share of its output."""
    rng = random.Random(seed)
    prompt = distributions.parse("lognormal:512:0.6").sample(rows, rng)
    output = distributions.parse("lognormal:256:0.5").sample(rows, rng)
    return [p + int(rng.random() * o) for p, o in zip(prompt, output)]


def fill(engine: ContinuousEngine, lengths: list[int]) -> None:
    """Make rows 0…n-1 running at `lengths`, each over its own shuffled blocks, and select them all."""
    st, bs = engine.state, engine.block_size
    need = [-(-(n + 1 + REPLAYS + 8) // bs) for n in lengths]  # room for every replay's new token
    order = torch.randperm(st.blocks - 1, generator=torch.Generator().manual_seed(0))[:sum(need)] + 1
    table, at = torch.zeros_like(st.table, device="cpu"), 0
    for row, n in enumerate(need):
        table[row, :n] = order[at:at + n].int()
        at += n
    st.table.copy_(table)
    st.pos[:len(lengths)] = torch.tensor(lengths, device=st.pos.device)
    st.active[:len(lengths)] = 1
    engine.views[len(lengths)].sel.copy_(torch.arange(len(lengths), device=st.sel.device))


def kernel_split(graph: torch.cuda.CUDAGraph, replays: int = 5) -> dict[str, float]:
    """ms per replay of each kernel kind, from the profiler's device times."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        us = event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total
        kind = next((k for k, names in KINDS if any(n in event.key for n in names)), "other")
        totals[kind] += us / 1e3 / replays
        totals[f"kernel:{event.key[:80]}"] = us / 1e3 / replays
    return dict(totals)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--json", default="docs/bench-decode-step.json")
    args = ap.parse_args()
    device = torch.device("cuda")
    calib = calibrate(device, torch.bfloat16)
    loaded = load(args.model, "bfloat16", device)
    static = FastEngine(loaded)
    static.setup(1, 64, 2)  # compiles the decoder the continuous engine shares
    static.release()
    engine = ContinuousEngine(static.decoder, device)
    lengths = running_lengths(args.rows)
    engine.setup(args.rows, max(lengths) + REPLAYS + 64, token_budget=8192)
    fill(engine, lengths)
    graph = engine.captured[args.rows]
    with torch.compiler.set_stance("fail_on_recompile"):
        graph.replay()
        times = replay_times_ms(graph, REPLAYS)
        split = kernel_split(graph)
    info, bw, peak = loaded.info, calib["copy_bytes_per_s"], calib["matmul_flops_per_s"]
    kv_bytes = sum(n + 1 for n in lengths) * info.kv_bytes_per_token
    weights_ms = info.weight_bytes / bw * 1e3
    matmul_ms = 2 * matmul_params(loaded) * args.rows / peak * 1e3
    kv_ms = kv_bytes / bw * 1e3
    step_ms = statistics.median(times)
    row = {"model": args.model, "rows": args.rows, "median_context": statistics.median(lengths),
           "step_gpu_ms": step_ms, "floor_bytes_ms": weights_ms + kv_ms,
           "floor_roofline_ms": max(weights_ms, matmul_ms) + kv_ms, "weights_bytes_ms": weights_ms,
           "matmul_flops_ms": matmul_ms, "kv_bytes_ms": kv_ms,
           "x_bytes_floor": step_ms / (weights_ms + kv_ms), "x_roofline": step_ms / (max(weights_ms, matmul_ms) + kv_ms),
           "split_ms": {k: v for k, v in split.items() if not k.startswith("kernel:")},
           "top_kernels_ms": dict(sorted(((k[7:], v) for k, v in split.items() if k.startswith("kernel:")),
                                         key=lambda kv: -kv[1])[:12]),
           "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "calibration": calib}
    print(json.dumps(row, indent=1))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
