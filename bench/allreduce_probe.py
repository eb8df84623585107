"""Standalone all-reduce probe: the all-reduces of one tensor-parallel decode step, timed alone.

A TP=K decode step of a Llama-family model sums two [batch, hidden] bfloat16 tensors per layer over
the ranks (after o_proj and after down_proj). This captures exactly that many all-reduces of that
shape in one CUDA graph per batch size, on NCCL with NVLink multicast off (as the runner does), and
times its replays with CUDA events three ways: back to back; each after a one-thread GPU spin of
`--gap-us`; each after a memory-bound copy over every SM of about `--gap-us` (the compute between two
all-reduces of a decode step is memory-bound matmuls). Spins and copies alone are timed and
subtracted. The tensor-parallel sweep's `comm_ms_per_step` (the step graph minus the same step
without all-reduces, runners/engines/fast_tp.py) is compared with `ms_per_step`, the figure after
copies: on two H200s the step's figure was 6–19 % above it at batches 1–256 (Llama-3.1-8B), while
spins (one thread on one SM) gave 13–26 % less than copies and back to back 1.3–2.2× as much (each
all-reduce then also waits for the previous one's flags to clear on the peer, which compute hides).

Usage: python3 bench/allreduce_probe.py MODEL OUT.json [--world 2] [--batches 1,16,64] [--gap-us 50]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runners.engines.parallel import MULTICAST_OFF, free_port  # noqa: E402
from runners.engines.presets import PRESETS  # noqa: E402

REPLAYS = 20


def graph_ms(x: torch.Tensor, calls: int, reduce: bool, spin_cycles: int = 0,
             copy: tuple[torch.Tensor, torch.Tensor] | None = None) -> float:
    """Median over REPLAYS replays of a graph of `calls` × (a spin of spin_cycles or a copy, then an
    in-place all-reduce of x if `reduce`)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # NCCL's first call on this shape runs outside the capture
        for _ in range(3):
            dist.all_reduce(x)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            if spin_cycles:
                torch.cuda._sleep(spin_cycles)
            if copy is not None:
                copy[0].copy_(copy[1])
            if reduce:
                dist.all_reduce(x)
    timed = []
    for k in range(REPLAYS + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        if k >= 2:
            timed.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in timed)


def cycles_per_us() -> float:
    """The spin kernel's clock, measured: a 10 M-cycle spin timed with events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return 10_000_000 / (start.elapsed_time(end) * 1e3)


def worker(rank: int, world: int, port: int, model: str, batches: list[int], gap_us: float, out: str) -> None:
    os.environ.update(MULTICAST_OFF, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    hidden, layers = PRESETS[model]["hidden_size"], PRESETS[model]["num_hidden_layers"]
    calls = 2 * layers
    spin = int(gap_us * cycles_per_us())
    src = torch.empty(int(gap_us * 1e-6 * 2e12), dtype=torch.uint8, device="cuda")  # read + write at ~4 TB/s
    copy = (torch.empty_like(src), src)
    rows = []
    for batch in batches:
        x = torch.zeros(batch, hidden, dtype=torch.bfloat16, device="cuda")
        back_to_back = graph_ms(x, calls, True, 0)
        spaced = graph_ms(x, calls, True, spin) - graph_ms(x, calls, False, spin)
        after_copy = graph_ms(x, calls, True, copy=copy) - graph_ms(x, calls, False, copy=copy)
        rows.append({"batch": batch, "bytes_per_call": x.numel() * x.element_size(), "calls_per_step": calls,
                     "ms_per_step": after_copy, "ms_per_step_after_spin": spaced,
                     "ms_per_step_back_to_back": back_to_back, "gap_us": gap_us})
    if rank == 0:
        Path(out).write_text(json.dumps({"model": model, "world": world, "gpu": torch.cuda.get_device_name(0),
                                         "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                                         "rows": rows}, indent=1))
        for r in rows:
            print(f"batch {r['batch']:>4}: {r['calls_per_step']} all-reduces of {r['bytes_per_call']:>9,} B: "
                  f"{r['ms_per_step']:.3f} ms/step after {gap_us:g} µs copies, {r['ms_per_step_after_spin']:.3f} "
                  f"after spins, {r['ms_per_step_back_to_back']:.3f} back to back")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("model", choices=sorted(PRESETS))
    parser.add_argument("out")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--batches", default="1,4,16,64,128,256,512")
    parser.add_argument("--gap-us", type=float, default=50.0, help="GPU time between two all-reduces")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    mp.spawn(worker, args=(args.world, free_port(), args.model, batches, args.gap_us, args.out), nprocs=args.world)


if __name__ == "__main__":
    main()
