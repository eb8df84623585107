"""Decode attention per layer on a GPU: the slot cache against the paged kernel's configurations.

Issue 32's bar: for the 8B preset's heads (32 query, 8 KV, head_dim 128, bfloat16), 128 and 256 rows of
mixed lengths, the paged kernel within 1.3× the floor of reading the rows' own K/V bytes once at the
measured copy bandwidth. Lengths are drawn uniformly from [64, 2560] (mean about 1 310, as the mixed
workload's rows had), the slot cache is as long as the longest request the workload can make (2 624),
and the pool's blocks are handed out in a shuffled order, as a long-running server's free list would.

Every configuration is checked against the float32 reference (relative L2 error and worst absolute
error) and timed with CUDA events over graph replays (median of 50), so launch gaps are not counted.
Prints a markdown table; writes the numbers as JSON to the path given (docs/bench-paged-attention.json).
`--rows 1,4,16` times few rows instead, where a row's KV heads times its spans may not fill the GPU's SMs.
Usage: python3 bench/paged_attention.py [OUT_JSON] [--rows 128,256]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runners.engines.kernels import paged_attention, paged_kernels  # noqa: E402
from runners.engines.kernels.quant_kernels import graph_replay_ms  # noqa: E402
from runners.telemetry import calibrate

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
SLOT_LEN = 2624
C = paged_kernels.Config
CONFIGS = [(16, C()), (32, C()), (64, C()), (16, C(tile=32)), (16, C(tile=128)), (32, C(split=256)),
           (16, C(num_warps=2)), (16, C(num_warps=8)), (16, C(num_stages=3)), (16, C(num_stages=4)),
           (32, C(num_stages=3)), (32, C(tile=32, num_warps=2)), (64, C(num_stages=3)), (16, C(split=1024)),
           (32, C(split=128)), (32, C(split=64, tile=32)), (32, None)]  # None: config_for's choice for the rows


def graph_ms(fn, reps: int = 50) -> float:
    """Median ms of one call, replayed from a CUDA graph (runners.engines.kernels.quant_kernels' timing helper)."""
    return statistics.median(graph_replay_ms(fn, reps))


def copy_bandwidth() -> float:
    """Bytes/s of the runs' own calibration (runners.telemetry.calibrate: a 1 GiB device copy, read + write counted)."""
    return calibrate._measure(torch.device("cuda"), torch.bfloat16)[0]


def slot_cache_ms(q: torch.Tensor, lens: torch.Tensor) -> float:
    """The slot-cache decode attention of fast 2 and earlier (a masked matmul over the whole slot) at the same rows."""
    B = q.shape[0]
    kc = torch.randn(B, KV_HEADS, SLOT_LEN, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    key = torch.arange(SLOT_LEN, device="cuda")
    mask = torch.zeros(B, SLOT_LEN, device="cuda", dtype=torch.bfloat16).masked_fill(
        key[None, :] >= lens[:, None], float("-inf"))[:, None, None, :]
    qg = q.view(B, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM)

    def step() -> torch.Tensor:
        scores = torch.matmul(qg, kc.transpose(-1, -2)) * HEAD_DIM**-0.5 + mask
        return torch.matmul(torch.softmax(scores.float(), dim=-1).to(q.dtype), vc)
    return graph_ms(step)


def paged(q: torch.Tensor, lens: torch.Tensor, block_size: int, gen: torch.Generator):
    """A shuffled pool holding every row's tokens, and the row block tables."""
    B = q.shape[0]
    max_blocks = -(-SLOT_LEN // block_size)
    need = (-(-lens // block_size)).tolist()
    total = sum(need) + 1
    order = torch.randperm(total - 1, generator=gen) + 1  # block 0 is the trash block of parked rows
    table = torch.zeros(B, max_blocks, dtype=torch.int32)
    at = 0
    for b, n in enumerate(need):
        table[b, :n] = order[at:at + n].int()
        at += n
    k = torch.randn(total * block_size, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    return k, torch.randn_like(k), table.cuda()


def add(rows_out: list[dict], r: dict) -> None:
    """Keep a measured row and print it at once: a run cut short by its time limit keeps what it measured."""
    rows_out.append(r)
    err = "" if r["rel_err"] is None else f"{r['rel_err']:.1e}"
    print(f"| {r['rows']} | {r['mean_len']:.0f} | {r['config']} | {r['ms']:.3f} | {r['floor_ms']:.3f} | "
          f"{r['ms'] / r['floor_ms']:.2f} | {err} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_json", nargs="?", type=Path)
    ap.add_argument("--rows", default="128,256", help="comma-separated row counts")
    args = ap.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    copy_bandwidth()  # the first measurement also brings the clocks up
    bandwidth = copy_bandwidth()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, copy bandwidth {bandwidth / 1e12:.2f} TB/s")
    print("| rows | mean len | candidate | ms | floor ms | × floor | rel L2 err |")
    print("|---|---|---|---|---|---|---|")
    rows_out: list[dict] = []
    for B in (int(r) for r in args.rows.split(",")):
        lens = torch.randint(64, 2561, (B,), generator=gen).cuda()
        q = torch.randn(B, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        floor_ms = int(lens.sum()) * KV_HEADS * HEAD_DIM * 2 * 2 / bandwidth * 1e3
        add(rows_out, {"rows": B, "config": "slot cache (matmul + mask)", "ms": slot_cache_ms(q, lens),
                       "floor_ms": floor_ms, "mean_len": float(lens.float().mean()), "rel_err": None})
        for block_size, config in CONFIGS:
            k, v, table = paged(q, lens, block_size, gen)
            ref = paged_attention.reference(q.float(), k.float(), v.float(), table, lens, block_size)
            got = paged_kernels.decode(q, k, v, table, lens, block_size, config)
            err = float((got.float() - ref).norm() / ref.norm())
            worst = float((got.float() - ref).abs().max())
            ms = graph_ms(lambda: paged_kernels.decode(q, k, v, table, lens, block_size, config))
            chosen = config or paged_kernels.config_for(B, KV_HEADS, table.shape[1] * block_size, sms)
            add(rows_out, {"rows": B, "config": f"paged block {block_size}, {'rule: ' * (config is None)}{chosen}",
                           "ms": ms, "floor_ms": floor_ms, "mean_len": float(lens.float().mean()),
                           "rel_err": err, "max_abs_err": worst})
    if args.out_json:
        args.out_json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                             "copy_bandwidth_Bps": bandwidth, "rows": rows_out}, indent=1))


if __name__ == "__main__":
    main()
