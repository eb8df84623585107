"""Where a packed prefill's time goes: host issue time against GPU time, and the top kernels and ops.

    python3 bench/profile_prefill.py [--model llama-3.2-1b] [--prompts 512,2048] [--rows 1]

For each prompt length: host time to pack the chunks, host time to issue the prefill (no sync), GPU
time of the prefill (CUDA events), then a torch.profiler table of one prefill. When issue time is
close to GPU time, the prefill is launch-bound (the host, not the GPU, sets its speed).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.engines.fast import FastEngine  # noqa: E402
from runners.engines.models import load  # noqa: E402

REPEATS = 5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--prompts", default="512,2048")
    ap.add_argument("--rows", type=int, default=1)
    args = ap.parse_args()
    loaded = load(args.model, "bfloat16", torch.device("cuda"))
    engine = FastEngine(loaded, graphs=False)  # compiled pieces, no graphs: the packed prefill as issued
    for length in (int(x) for x in args.prompts.split(",")):
        prompts = torch.randint(1, loaded.info.vocab, (args.rows, length)).tolist()
        engine.setup(args.rows, length, 2)
        pack_ms, issue_ms, gpu_ms = [], [], []
        for _ in range(REPEATS + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            packed = engine._pack(prompts, length)
            t1 = time.perf_counter()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            engine.decoder.prefill(packed, engine.state)
            t2 = time.perf_counter()
            end.record()
            end.synchronize()
            pack_ms.append((t1 - t0) * 1e3)
            issue_ms.append((t2 - t1) * 1e3)
            gpu_ms.append(start.elapsed_time(end))
        print(f"\n## {args.model} rows {args.rows} prompt {length}: pack {statistics.median(pack_ms[1:]):.2f} ms, "
              f"issue {statistics.median(issue_ms[1:]):.2f} ms, GPU {statistics.median(gpu_ms[1:]):.2f} ms", flush=True)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            engine.decoder.prefill(engine._pack(prompts, length), engine.state)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=14), flush=True)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14), flush=True)
        engine.release()


if __name__ == "__main__":
    main()
