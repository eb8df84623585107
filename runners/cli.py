"""`python -m runners sweep ...`: options on the command line or in `--spec FILE.json`;
`python -m runners serve ...`: an OpenAI-compatible server over the continuous engine (runners.serving.serve).

Every SweepSpec field is a flag (`batch_sizes` → `--batch-sizes`, a field that defaults to on →
`--no-calibrate`), with the help its declaration carries. Exit codes: 0 done, 1 failed, 2 rejected
spec (nothing written), 3 cancelled.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runners import cancel
from runners.results import contract
from runners.results.runfolder import check_out_dir
from runners.spec import SpecError, SweepSpec, validate
from runners.spec.options import whole
from runners.spec.sweep import MAX_TOKENS, spec_fields

EXIT = {"done": 0, "failed": 1, "cancelled": 3}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runners", description=__doc__, allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help="run a batch-size sweep and write a run folder", allow_abbrev=False)
    sweep.add_argument("--spec", type=Path, help="JSON file with any of the options below")
    sweep.add_argument("--out", type=Path, required=True, help="run folder to create (data/runs/<id>)")
    groups: dict[str, Any] = {"": sweep}
    for info in spec_fields():
        if info.group not in groups:
            groups[info.group] = sweep.add_argument_group(info.group)
        group = groups[info.group]
        flag = info.name.replace("_", "-")
        if info.default is True:
            group.add_argument(f"--no-{flag}", dest=info.name, action="store_false", default=None,
                               help=f"do not {info.help}")
        elif info.kind == "bool":
            group.add_argument(f"--{flag}", dest=info.name, action="store_true", default=None, help=info.help)
        else:
            group.add_argument(f"--{flag}", dest=info.name, help=info.help)
    _serve_parser(sub.add_parser("serve", help="serve one model over an OpenAI-compatible HTTP API (continuous "
                                                "engine)",
                                allow_abbrev=False))
    return parser


def _serve_parser(serve: argparse.ArgumentParser) -> None:
    """`runners serve` flags, named as vLLM names them so a server command reads the same for both."""
    serve.add_argument("--model", required=True, help="preset or a local HF checkpoint dir")
    serve.add_argument("--dtype", default="bfloat16", help="float32, bfloat16, float16, int8, fp8, fp8-dynamic")
    serve.add_argument("--quantize-lm-head", action="store_true",
                       help=next(i.help for i in spec_fields() if i.name == "quantize_lm_head"))
    serve.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    serve.add_argument("--seed", type=_as_spec("seed"), default=0, help="seeds a preset's random weights")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    serve.add_argument("--port", type=_bounded("port", 1, 65_535), default=8000)
    serve.add_argument("--served-model-name", default="", help="the name clients ask for (default: --model)")
    serve.add_argument("--max-num-seqs", type=_as_spec("max_num_seqs"), default=8, help="running-batch limit (slots)")
    serve.add_argument("--max-model-len", type=_bounded("max_model_len", 1, MAX_TOKENS), default=2048,
                       help="prompt + output tokens one request may hold")
    serve.add_argument("--max-num-batched-tokens", type=_as_spec("max_num_batched_tokens"), default=2048,
                       help="per-step token budget")
    serve.add_argument("--api-key-env", default="", help="an environment variable holding the key every request "
                                                         "must carry as its bearer token")
    serve.add_argument("--timings", type=Path, help="append each finished request's engine times (JSON lines)")


def _as_spec(name: str) -> Callable[[str], int]:
    """A `serve` flag's type: one whole number within the bounds the sweep spec declares for its option of
    that name (a list option's values start at 1), so a sweep and a server answer it with the same message."""
    info = next(info for info in spec_fields() if info.name == name)
    return _bounded(name, 1 if info.least is None else int(info.least), int(info.most))


def _bounded(name: str, least: int, most: int) -> Callable[[str], int]:
    """A `serve` flag's type: a whole number from `least` to `most`, checked as spec options are."""
    def parse(text: str) -> int:
        try:
            return whole(text, name, least, most)
        except SpecError as err:
            raise argparse.ArgumentTypeError(err.message) from None
    return parse


def _raw_spec(args: argparse.Namespace) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    if args.spec:
        try:
            raw = json.loads(args.spec.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise SpecError("spec", f"cannot read {args.spec}: {err}") from None
        if not isinstance(raw, dict):
            raise SpecError("spec", f"{args.spec} must hold a JSON object")
        raw = {k: v for k, v in raw.items() if k not in contract.APP_SPEC_KEYS}
    for info in spec_fields():
        value = getattr(args, info.name)
        if value is not None:
            raw[info.name] = value
    return raw


def spec_of_options(options: Sequence[str]) -> SweepSpec:
    """The spec `runners sweep OPTIONS` would run, parsed and validated as the command does (SpecError if bad)."""
    return validate(_raw_spec(build_parser().parse_args(["sweep", "--out", "unused", *options])))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        from runners.serving.serve import main as serve  # torch and aiohttp load only to serve

        return serve(args)
    # The handler comes first, before torch: a KeyboardInterrupt raised inside a library's import can be
    # swallowed by its own `except`, and the sweep would then run on as if Ctrl-C had never been pressed.
    cancel.install_handlers()
    try:
        spec = validate(_raw_spec(args))
        check_out_dir(args.out)
        from runners.sweep import run_sweep  # torch loads only once the spec is known to be good

        if cancel.requested():  # Ctrl-C before the sweep began: nothing is written yet, nothing to keep
            print(f"cancelled: {args.out} (before the sweep started; nothing written)", file=sys.stderr)
            return EXIT["cancelled"]
        status = run_sweep(spec, args.out)
    except (SpecError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    reason = f": {status['error']}" if status["error"] else ""  # a failure says why here, not only in the folder
    print(f"{status['state']}: {args.out}{reason}", file=sys.stderr)
    return EXIT[status["state"]]
