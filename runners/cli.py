"""`python -m runners sweep ...`: options on the command line or in `--spec FILE.json`.

Exit codes: 0 done, 1 failed, 2 rejected spec (nothing written), 3 cancelled.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from runners import cancel
from runners.runfolder import check_out_dir
from runners.spec import SpecError, validate

EXIT = {"done": 0, "failed": 1, "cancelled": 3}
OPTIONS = ("model", "dtype", "engine", "mode", "batch_sizes", "prompt_len", "output_len", "repeats",
           "warmup", "seed", "device", "max_batch_size", "on_oom", "telemetry_hz", "name",
           "max_num_seqs", "arrival", "concurrency", "num_requests", "max_num_batched_tokens",
           "kv_cache_tokens", "slo_metric", "slo_ms", "tensor_parallel", "replicas")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runners", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help="run a batch-size sweep and write a run folder")
    sweep.add_argument("--spec", type=Path, help="JSON file with any of the options below")
    sweep.add_argument("--out", type=Path, required=True, help="run folder to create (data/runs/<id>)")
    sweep.add_argument("--model", help="preset (tiny, llama-3.2-1b, llama-3.1-8b, qwen2.5-7b, mistral-7b) or a local HF checkpoint dir")
    sweep.add_argument("--dtype", help="float32, bfloat16, float16, or with --engine fast: fp8, fp8-dynamic, "
                                       "int8 (quantised weights, bfloat16 activations and KV cache)")
    sweep.add_argument("--engine", help="hf-generate or fast")
    sweep.add_argument("--mode", help="static (default) or continuous (fast engine; options below)")
    sweep.add_argument("--batch-sizes", dest="batch_sizes", help="1,2,4 or pow2:1:256")
    sweep.add_argument("--prompt-len", dest="prompt_len", help="fixed:N | uniform:LO:HI | normal:MEAN:SD | lognormal:MEDIAN:SIGMA | file:PATH")
    sweep.add_argument("--output-len", dest="output_len", help="same syntax as --prompt-len")
    sweep.add_argument("--repeats", help="measured repeats per point (default 3)")
    sweep.add_argument("--warmup", help="warm-up repeats per point (default 1)")
    sweep.add_argument("--seed")
    sweep.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    sweep.add_argument("--max-batch-size", dest="max_batch_size", help="ceiling on batch sizes (default 4096)")
    sweep.add_argument("--on-oom", dest="on_oom", help="stop (default) or continue")
    sweep.add_argument("--telemetry-hz", dest="telemetry_hz")
    sweep.add_argument("--no-calibrate", dest="calibrate", action="store_false", default=None)
    sweep.add_argument("--name")
    multi = sweep.add_argument_group("several processes (static mode; one rank per GPU, on CPU processes sharing the host)")
    multi.add_argument("--tensor-parallel", dest="tensor_parallel",
                       help="shard the fast engine's model over K ranks (default 1)")
    multi.add_argument("--replicas", help="K independent engines, each batch split between them (default 1)")
    cont = sweep.add_argument_group("continuous mode (one of --max-num-seqs, --arrival, --concurrency may list values to sweep)")
    cont.add_argument("--max-num-seqs", dest="max_num_seqs", help="running-batch limit: 8, 1,2,4 or pow2:1:256")
    cont.add_argument("--arrival", help="open loop: poisson:RATE requests/s, or poisson:R1,R2,... to sweep")
    cont.add_argument("--concurrency", help="closed loop: N clients, or a list to sweep")
    cont.add_argument("--num-requests", dest="num_requests", help="requests per repeat (default 64)")
    cont.add_argument("--max-num-batched-tokens", dest="max_num_batched_tokens",
                      help="per-step token budget; longer prompts prefill in chunks (default 2048)")
    cont.add_argument("--kv-cache-tokens", dest="kv_cache_tokens",
                      help="cap on KV tokens held by admitted requests (default 0: the whole slot cache)")
    cont.add_argument("--slo-metric", dest="slo_metric", help="goodput SLO metric: ttft (default), itl or e2e")
    cont.add_argument("--slo-ms", dest="slo_ms", help="goodput SLO limit in ms (default 1000)")
    return parser


def _raw_spec(args: argparse.Namespace) -> dict:
    raw: dict = {}
    if args.spec:
        try:
            raw = json.loads(args.spec.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise SpecError("spec", f"cannot read {args.spec}: {err}") from None
        if not isinstance(raw, dict):
            raise SpecError("spec", f"{args.spec} must hold a JSON object")
        raw = {k: v for k, v in raw.items() if k not in ("run_id", "created_at")}
    for name in OPTIONS + ("calibrate",):
        value = getattr(args, name, None)
        if value is not None:
            raw[name] = value
    return raw


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        spec = validate(_raw_spec(args))
        check_out_dir(args.out)
        from runners.sweep import run_sweep  # torch loads only once the spec is known to be good

        cancel.install_sigterm_handler()
        state = run_sweep(spec, args.out)
    except (SpecError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{state}: {args.out}", file=sys.stderr)
    return EXIT[state]
