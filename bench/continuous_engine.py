"""Continuous engine against the static one and the roofline, on one GPU (issue 13's bar).

    python3 bench/continuous_engine.py [--models llama-3.2-1b,llama-3.1-8b] [--parts prefill,decode,ttft]
                                       [--json PATH]

- prefill: one prompt of 512 and 2048 tokens, static engine (batch 1, CUDA events) and continuous
  engine (a lone request: its TTFT, host included), against max(weight bytes / copy rate,
  prefill FLOPs / matmul rate) with both rates measured here (runners.telemetry.calibrate).
- decode: decode-only steps with N active rows (N requests of prompt 256 / output 64 admitted at
  once), continuous step (host clock, after its one sync) vs static step at batch N (CUDA events).
- ttft: a light load (Poisson 2 req/s, chat prompts lognormal:512:0.6, 64-token outputs,
  max_num_seqs 32): TTFT P50 vs the static engine's lone prefill of the same prompts + one step.
Every measured call runs under torch.compiler's fail_on_recompile stance: a compile inside a
measured step fails the bench instead of hiding in its numbers.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine import floors  # noqa: E402  (bench/engine.py: the roofline floors of one shape)

from runners.engines.base import Batch  # noqa: E402
from runners.engines.continuous import ContinuousEngine  # noqa: E402
from runners.engines.fast import FastEngine  # noqa: E402
from runners.engines.models import LoadedModel, load  # noqa: E402
from runners.telemetry.calibrate import calibrate  # noqa: E402
from runners.workload import distributions  # noqa: E402

REPEATS = 5


def prompts(vocab: int, lengths: list[int], seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, vocab, (n,), generator=g).tolist() for n in lengths]


def median_step_ms(steps, decode_rows: int) -> float:
    return statistics.median((s.end_s - s.start_s) * 1e3 for s in steps
                             if s.decode_tokens == decode_rows and not s.prefill_tokens)


def prefill_part(loaded: LoadedModel, static: FastEngine, calib: dict) -> list[dict]:
    rows = []
    for length in (512, 2048):
        ids = prompts(loaded.info.vocab, [length], seed=length)
        static.setup(1, length, 2)
        with torch.compiler.set_stance("fail_on_recompile"):
            static_ms = statistics.median(static.generate(Batch(ids, [2])).token_ms[0] for _ in range(REPEATS))
        static.release()
        served = ContinuousEngine(static.decoder, static.device)
        served.setup(1, length + 2)
        with torch.compiler.set_stance("fail_on_recompile"):
            runs = [served.run(ids, [2], {"concurrency": 1, "seed": 0}, 4096) for _ in range(REPEATS)]
        served.release()
        cont_ms = statistics.median((r.requests[0].token_s[0] - r.requests[0].arrival_s) * 1e3 for r in runs)
        f = floors(loaded, calib, 1, length, 1)
        roof_ms = max(loaded.info.weight_bytes / calib["copy_bytes_per_s"],
                      f["prefill_flops"] / calib["matmul_flops_per_s"]) * 1e3
        rows.append({"part": "prefill", "prompt": length, "static_ms": static_ms, "continuous_ms": cont_ms,
                     "roofline_ms": roof_ms, "static_ratio": static_ms / roof_ms, "continuous_ratio": cont_ms / roof_ms})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def decode_part(loaded: LoadedModel, static: FastEngine, calib: dict) -> list[dict]:
    rows = []
    for n in (1, 16, 64, 256):
        ids = prompts(loaded.info.vocab, [256] * n, seed=n)
        static.setup(n, 256, 64)
        with torch.compiler.set_stance("fail_on_recompile"):
            gens = [static.generate(Batch(ids, [64] * n)) for _ in range(REPEATS)]
        static.release()
        static_ms = statistics.median(b - a for g in gens for a, b in zip(g.token_ms, g.token_ms[1:]))
        served = ContinuousEngine(static.decoder, static.device)
        served.setup(n, 320)
        served.run(ids, [64] * n, {"concurrency": n, "seed": 0}, 256 * n)  # warm-up (allocator)
        with torch.compiler.set_stance("fail_on_recompile"):
            runs = [served.run(ids, [64] * n, {"concurrency": n, "seed": 0}, 256 * n) for _ in range(REPEATS)]
        served.release()
        steps = [s for r in runs for s in r.steps]
        cont_ms = median_step_ms(steps, n)
        f = floors(loaded, calib, n, 256, 64)
        floor_ms = max(f["floor_bytes_ms"], f["floor_flops_ms"])
        rows.append({"part": "decode", "rows": n, "static_ms": static_ms, "continuous_ms": cont_ms,
                     "ratio": cont_ms / static_ms, "floor_ms": floor_ms, "static_floor_ratio": static_ms / floor_ms,
                     "continuous_floor_ratio": cont_ms / floor_ms, "steps": len(steps)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def ttft_part(loaded: LoadedModel, static: FastEngine) -> list[dict]:
    lengths = distributions.parse("lognormal:512:0.6").sample(16, random.Random("ttft"))
    ids = prompts(loaded.info.vocab, lengths, seed=7)
    static.setup(1, max(lengths), 2)
    with torch.compiler.set_stance("fail_on_recompile"):
        lone = [static.generate(Batch([p], [2])).token_ms for p in ids for _ in range(2)][1::2]
    static.release()
    baseline = [t[0] + (t[1] - t[0]) for t in lone]  # lone prefill + one decode step
    served = ContinuousEngine(static.decoder, static.device)
    served.setup(32, max(lengths) + 64)
    served.run(ids, [64] * 16, {"rate": 2.0, "seed": 1}, 8192)  # warm-up
    with torch.compiler.set_stance("fail_on_recompile"):
        result = served.run(ids, [64] * 16, {"rate": 2.0, "seed": 0}, 8192)
    served.release()
    ttft = [(r.token_s[0] - r.arrival_s) * 1e3 for r in result.requests]
    queue = [(r.admit_s - r.arrival_s) * 1e3 for r in result.requests]
    row = {"part": "ttft", "requests": 16, "rate": 2.0, "ttft_p50_ms": statistics.median(ttft),
           "baseline_p50_ms": statistics.median(baseline), "ratio_p50": statistics.median(ttft) / statistics.median(baseline),
           "ratio_per_request_p50": statistics.median(t / b for t, b in zip(ttft, baseline)),
           "queue_max_ms": max(queue), "ttft_ms": ttft, "baseline_ms": baseline}
    print(json.dumps(row), flush=True)
    return [row]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--models", default="llama-3.2-1b,llama-3.1-8b")
    ap.add_argument("--parts", default="prefill,decode,ttft")
    ap.add_argument("--json", default="docs/bench-continuous-engine.json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/continuous_engine.py measures a GPU; no CUDA device here")
    device = torch.device("cuda")
    calib = calibrate(device, torch.bfloat16)
    results = []
    for model in args.models.split(","):
        loaded = load(model, "bfloat16", device)
        static = FastEngine(loaded)
        print(f"{model}: {static.version()}", flush=True)
        parts = {"prefill": lambda: prefill_part(loaded, static, calib),
                 "decode": lambda: decode_part(loaded, static, calib), "ttft": lambda: ttft_part(loaded, static)}
        for name in args.parts.split(","):
            try:
                rows = parts[name]()
            except Exception as err:  # one part's failure still leaves the others' numbers
                rows = [{"part": name, "error": f"{type(err).__name__}: {err}"}]
                print(json.dumps(rows[0]), flush=True)
            results += [{**r, "model": model} for r in rows]
        del static, loaded
        torch.cuda.empty_cache()
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "transformers": transformers.__version__, "python": platform.python_version()}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"env": env, "calibration": calib, "results": results}, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
