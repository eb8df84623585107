"""Engine benchmark: decode step time against the measured roofline floor, per model and batch.

    python bench/engine.py [--engines fast,hf-generate] [--models llama-3.2-1b,llama-3.1-8b]
                           [--dtypes bfloat16,fp8,int8,int8+lm_head] [--batches 1,16,256] [--quick]
                           [--repeats 3]
                           [--no-compile] [--json PATH]

Floor per decode step = max(bytes / copy rate, FLOPs / matmul rate), both rates measured here
(runners.telemetry.calibrate). Bytes = all weight bytes + KV bytes of the mean context of a decode step;
FLOPs = 2 × matmul parameters × batch + attention (4 × batch × context × heads × head_dim × layers).
With several dtypes (the fast engine's fp8 and int8 weights, issue 36) it ends with each dtype's decode step
as a share of bfloat16's at the same batch and lengths; a dtype written `int8+lm_head` quantises the output head
as well (the sweep's --quantize-lm-head). The JSON is rewritten after every row, so a run cut by
a timeout keeps what it measured.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.engines.base import Batch, Engine  # noqa: E402
from runners.engines.fast import FastEngine  # noqa: E402
from runners.engines.quant_error import LAYER_ERRORS  # noqa: E402
from runners.engines.quant_layout import LM_HEAD, QUANT_DTYPES  # noqa: E402
from runners.engines.hf_generate import HFGenerateEngine  # noqa: E402
from runners.engines.models import LoadedModel, load  # noqa: E402
from runners.telemetry.calibrate import calibrate  # noqa: E402

SHORT = (256, 64, [1, 4, 16, 64, 256])
LONG = (4096, 256, [1, 8, 32])
QUICK_SHORT, QUICK_LONG = [1, 16, 64, 256], [8]
HF_QUICK = [1, 64]
LONG_MODELS = {"llama-3.1-8b"}


def cases(model: str, engine: str, quick: bool, batches: list[int] | None) -> list[tuple[int, int, int]]:
    """(batch, prompt, output) triples; hf-generate skips long prompts (minutes per point). Batches given:
    the short lengths at those batches only."""
    prompt, out, short_batches = SHORT
    if batches:
        return [(b, prompt, out) for b in batches]
    short = HF_QUICK if quick and engine == "hf-generate" else QUICK_SHORT if quick else short_batches
    todo = [(b, prompt, out) for b in short]
    if model in LONG_MODELS and engine == "fast":
        prompt, out, batches = LONG
        todo += [(b, prompt, out) for b in (QUICK_LONG if quick else batches)]
    return todo


def matmul_params(loaded: LoadedModel) -> int:
    """Parameters that take part in a matmul: all but an untied embedding table (a lookup)."""
    hf = loaded.model
    tied = hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    return loaded.info.params - (0 if tied else hf.model.embed_tokens.weight.numel())


def floors(loaded: LoadedModel, weight_bytes: int, calib: dict, b: int, p: int, n: int) -> dict:
    """Decode and prefill floors for one shape; context is the mean over the decode steps. `weight_bytes` are
    the bytes the engine reads (one byte a weight and the scales when quantised, not the loaded bfloat16)."""
    info = loaded.info
    ctx = p + n / 2
    attn_unit = info.heads * info.head_dim * info.layers
    bytes_ = weight_bytes + b * ctx * info.kv_bytes_per_token
    flops = 2 * matmul_params(loaded) * b + 4 * b * ctx * attn_unit
    lm_head = info.vocab * info.hidden
    prefill_flops = 2 * (matmul_params(loaded) - lm_head) * b * p + 2 * lm_head * b + 2 * b * p * p * attn_unit
    return {"floor_bytes_ms": bytes_ / calib["copy_bytes_per_s"] * 1e3,
            "floor_flops_ms": flops / calib["matmul_flops_per_s"] * 1e3,
            "step_bytes": bytes_, "step_flops": flops, "prefill_flops": prefill_flops}


def measure(engine: Engine, loaded: LoadedModel, calib: dict, b: int, p: int, n: int,
            repeats: int) -> dict:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    setup_s = engine.setup(b, p, n)
    g = torch.Generator().manual_seed(b * 7919 + p)
    prompts = torch.randint(1, loaded.info.vocab, (b, p), generator=g).tolist()
    batch = Batch(prompt_ids=prompts, output_lens=[n] * b)
    engine.generate(batch)  # warm-up
    gens = [engine.generate(batch) for _ in range(repeats)]
    steps = [t1 - t0 for gen in gens for t0, t1 in zip(gen.token_ms, gen.token_ms[1:])]
    wall_ms = statistics.median(gen.token_ms[-1] for gen in gens)
    prefill_ms = statistics.median(gen.token_ms[0] for gen in gens)
    f = floors(loaded, engine.facts().get("weight_bytes", loaded.info.weight_bytes), calib, b, p, n)
    floor_ms = max(f["floor_bytes_ms"], f["floor_flops_ms"])
    step_ms = statistics.median(steps)
    return {
        "batch": b, "prompt": p, "output": n, "status": "ok",
        "decode_step_ms": step_ms, "decode_step_ms_p95": sorted(steps)[int(0.95 * (len(steps) - 1))],
        **f, "floor_ms": floor_ms, "ratio": step_ms / floor_ms,
        "output_tokens_per_s": b * n / wall_ms * 1e3, "prefill_ms": prefill_ms,
        "prefill_tokens_per_s": b * p / prefill_ms * 1e3,
        "prefill_mfu": f["prefill_flops"] / (prefill_ms / 1e3) / calib["matmul_flops_per_s"],
        "setup_s": setup_s, "setup": gens[0].extra, "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "timing": gens[0].timing,
    }


def make(engine: str, loaded: LoadedModel, args: argparse.Namespace) -> Engine:
    if engine == "fast":
        return FastEngine(loaded, compile=not args.no_compile)
    return HFGenerateEngine(loaded)


def row_text(model: str, engine: str, r: dict) -> str:
    head = f"{engine:11} {model:13} {r['dtype']:12} {r['batch']:>4} {r['prompt']:>5} {r['output']:>4}"
    if r["status"] != "ok":
        return f"{head}  {r['status']}: {r.get('error', '')[:80]}"
    return (f"{head} {r['decode_step_ms']:8.2f} {r['floor_bytes_ms']:7.2f} {r['floor_flops_ms']:7.2f} "
            f"{r['ratio']:6.2f} {r['output_tokens_per_s']:9.0f} {r['prefill_ms']:9.1f} "
            f"{100 * r['prefill_mfu']:5.1f} {r['setup_s']:7.2f} {r['peak_allocated_bytes'] / 2**30:7.1f}")


HEADER = ("engine      model         dtype           B  prompt  out  step_ms bytes_fl flops_fl  ratio   out_tok/s "
          "prefill_ms  MFU%  setup_s peak_GiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--engines", default="fast,hf-generate")
    ap.add_argument("--models", default="llama-3.2-1b,llama-3.1-8b")
    ap.add_argument("--dtypes", default="bfloat16", help="weights per model: bfloat16, fp8, int8 (fast engine), "
                                                        "fp8+lm_head or int8+lm_head (the head quantised too)")
    ap.add_argument("--batches", type=lambda t: [int(b) for b in t.split(",")], default=None,
                    help="short lengths at these batches only (default: the standard cases)")
    ap.add_argument("--quick", action="store_true", help="fewer batches; hf-generate at batch 1 and 64 only")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true", help="fast engine: CUDA graphs of the eager step")
    ap.add_argument("--json", default="docs/bench-engine.json")
    args = ap.parse_args()
    for dtype in args.dtypes.split(","):
        weights, _, head = dtype.partition("+")
        if head not in ("", "lm_head") or (head and weights not in QUANT_DTYPES):
            sys.exit(f"unknown dtype {dtype!r}: a quantised dtype takes +lm_head ({', '.join(QUANT_DTYPES)})")
    if not torch.cuda.is_available():
        sys.exit("bench/engine.py measures a GPU; no CUDA device here")
    device = torch.device("cuda")
    calib = calibrate(device, torch.bfloat16)
    print(f"{calib['device']}: copy {calib['copy_bytes_per_s'] / 1e12:.2f} TB/s (read+write), "
          f"bf16 matmul {calib['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s ({calib['source']})", flush=True)
    results = []
    print(HEADER, flush=True)
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "transformers": transformers.__version__, "python": platform.python_version(),
           "cuda": torch.version.cuda}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    for model in args.models.split(","):
        for dtype in args.dtypes.split(","):
            weights, _, head = dtype.partition("+")
            torch._dynamo.reset()  # as in a sweep, one model's compiled code: every model adds guard entries to the
            # same code objects, and the 4th compiled model of a process hit the recompile limit (2026-12-04)
            loaded = load(model, weights, device, quantize_lm_head=head == "lm_head")
            for name in args.engines.split(","):
                engine = make(name, loaded, args)
                errors = quant_errors(engine.facts())
                repeats = 1 if name == "hf-generate" else args.repeats
                for b, p, n in cases(model, name, args.quick, args.batches):
                    try:
                        r = measure(engine, loaded, calib, b, p, n, repeats)
                    except torch.OutOfMemoryError as err:
                        r = {"batch": b, "prompt": p, "output": n, "status": "oom", "error": str(err)}
                    engine.release()
                    r.update(engine=name, engine_version=engine.version(), model=model, dtype=dtype, **errors)
                    results.append(r)
                    print(row_text(model, name, r), flush=True)
                    Path(args.json).write_text(json.dumps({"env": env, "calibration": calib, "args": vars(args),
                                                           "results": results}, indent=1))
                del engine
            del loaded
            torch.cuda.empty_cache()
    print(f"wrote {args.json}")
    for line in step_shares(results):
        print(line)


def quant_errors(facts: dict) -> dict:
    """A quantised engine's product errors against bfloat16 (runners.engines.quant_error): the median and worst
    over the layers, and lm_head's per kernel path when it is quantised; nothing for other engines."""
    if facts.get("quant_layer_error_median") is None:
        return {}
    head = {str(e["rows"]): e["rel_error"] for e in facts[LAYER_ERRORS] if e["matrix"] == LM_HEAD}
    return {"layer_error_median": facts["quant_layer_error_median"], "layer_error_max": facts["quant_layer_error_max"],
            "lm_head_error_by_rows": head or None}


def step_shares(results: list[dict]) -> list[str]:
    """Each non-bfloat16 row's decode step over bfloat16's at the same engine, model, batch and lengths."""
    key = lambda r: (r["engine"], r["model"], r["batch"], r["prompt"], r["output"])  # noqa: E731
    bf16 = {key(r): r["decode_step_ms"] for r in results if r["dtype"] == "bfloat16" and r["status"] == "ok"}
    return [f"{r['dtype']:8} {r['model']} batch {r['batch']:>4} ({r['prompt']}/{r['output']}): step "
            f"{r['decode_step_ms']:.3f} ms = {r['decode_step_ms'] / bf16[key(r)]:.3f}× bfloat16"
            for r in results if r["dtype"] != "bfloat16" and r["status"] == "ok" and key(r) in bf16]


if __name__ == "__main__":
    main()
