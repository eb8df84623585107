"""Why an `hf-generate` repeat can run 4x slower than its own replay: what a decode step pays for a new length.

    python3 bench/hf_first_shapes.py [--batch 4] [--prompt 700] [--output 400] [--repeats 4]
                                    [--sdpa cudnn,flash,efficient,math] [--kernels]
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 bench/hf_first_shapes.py ...

`generate()` grows its DynamicCache a token per step, so each decode step's attention has a key length no step had
before, the first time round. The same batch is generated `--repeats` times; per repeat it prints the wall time,
the median decode step, the segments torch's allocator took from the driver (cudaMalloc calls), its retries, and
the process's resident memory growth. `--sdpa` gives the engine the attention backends it may use (default:
torch's own choice, as the engine had before it left cuDNN out; `--sdpa flash,efficient,math` is the engine's
default now); `--kernels` profiles a short generate and prints the attention ops and kernels it ran.

On an H100 (twenty-second session, docs/benchmarks.md) the first repeat ran at 42 ms a step and every later one at
9.3 ms, with no new segment either way (so not the allocator) and 1.1 GiB more resident memory in the first alone:
a per-length cost paid once on the host. `--kernels` and `--sdpa` then showed who paid it (twenty-third session):
torch's choice ran cuDNN's attention and its first repeat at 51.7 ms a step; flash attention's first repeat ran at
11.7 ms, as fast as its later ones.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runners.engines.base import Batch  # noqa: E402
from runners.engines.hf_generate import HFGenerateEngine  # noqa: E402
from runners.engines.models import load  # noqa: E402
from runners.telemetry.telemetry import rss_bytes  # noqa: E402


BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
ATTENTION_WORDS = ("attn", "attention", "fmha", "flash", "cudnn", "sdpa", "softmax")


def attention_kernels(engine: HFGenerateEngine, batch: Batch) -> list[str]:
    """The ops (aten's name says the backend: `_scaled_dot_product_cudnn_attention`, `…_efficient_attention`) and
    CUDA kernels of a 4-token generate whose names say attention, most device time first."""
    short = Batch(prompt_ids=batch.prompt_ids, output_lens=[4] * batch.size)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profile:
        engine.generate(short)
    events = [e for e in profile.key_averages() if any(w in e.key.lower() for w in ATTENTION_WORDS)]
    return [f"{e.key[:110]} x{e.count}" for e in sorted(events, key=lambda e: -e.device_time_total)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.2-1b")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=700)
    parser.add_argument("--output", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--sdpa", type=lambda text: [BACKENDS[name] for name in text.split(",")], default=None,
                        help=f"the engine's attention backends, of {','.join(BACKENDS)} (default: torch's choice)")
    parser.add_argument("--kernels", action="store_true", help="print the attention ops and kernels of a short generate")
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    engine = HFGenerateEngine(load(args.model, "bfloat16", device), attention=tuple(args.sdpa) if args.sdpa else None)
    batch = Batch(prompt_ids=[[(7 * row + i) % 1000 + 10 for i in range(args.prompt)] for row in range(args.batch)],
                  output_lens=[args.output] * args.batch)
    print(f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')!r} torch {torch.__version__} "
          f"batch {args.batch} prompt {args.prompt} output {args.output}; {engine.version()}", flush=True)
    if args.kernels:
        print("attention kernels:", *attention_kernels(engine, batch), sep="\n  ", flush=True)
    timed_repeats(engine, batch, args.repeats, device)


def timed_repeats(engine: HFGenerateEngine, batch: Batch, repeats: int, device: torch.device) -> None:
    for repeat in range(repeats):
        before, rss = torch.cuda.memory_stats(device), rss_bytes()
        start = time.perf_counter()
        generation = engine.generate(batch)
        wall = time.perf_counter() - start
        after = torch.cuda.memory_stats(device)
        steps = [b - a for a, b in zip(generation.token_ms, generation.token_ms[1:])]
        print(f"repeat {repeat}: {wall:6.2f} s, decode step median {statistics.median(steps):6.2f} ms "
              f"(p90 {statistics.quantiles(steps, n=10)[-1]:6.2f}), segments +"
              f"{after['segment.all.allocated'] - before['segment.all.allocated']}, retries +"
              f"{after['num_alloc_retries'] - before['num_alloc_retries']}, reserved "
              f"{after['reserved_bytes.all.current'] / 2**30:.2f} GiB, rss +{(rss_bytes() - rss) / 2**20:.0f} MiB",
              flush=True)


if __name__ == "__main__":
    main()
