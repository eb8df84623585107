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
           "warmup", "seed", "device", "max_batch_size", "on_oom", "telemetry_hz", "name")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runners", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help="run a batch-size sweep and write a run folder")
    sweep.add_argument("--spec", type=Path, help="JSON file with any of the options below")
    sweep.add_argument("--out", type=Path, required=True, help="run folder to create (data/runs/<id>)")
    sweep.add_argument("--model", help="preset (tiny, llama-3.2-1b, llama-3.1-8b, qwen2.5-7b, mistral-7b) or a local HF checkpoint dir")
    sweep.add_argument("--dtype", help="float32, bfloat16 or float16")
    sweep.add_argument("--engine", help="hf-generate or fast")
    sweep.add_argument("--mode", help="static")
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
