"""`python -m runners sweep ...`: options on the command line or in `--spec FILE.json`.

Every SweepSpec field is a flag (`batch_sizes` → `--batch-sizes`, a field that defaults to on →
`--no-calibrate`), with the help its declaration carries. Exit codes: 0 done, 1 failed, 2 rejected
spec (nothing written), 3 cancelled.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from runners import cancel
from runners.runfolder import check_out_dir
from runners.spec import SpecError, SweepSpec, validate

EXIT = {"done": 0, "failed": 1, "cancelled": 3}
SPEC_FIELDS = fields(SweepSpec)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runners", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help="run a batch-size sweep and write a run folder")
    sweep.add_argument("--spec", type=Path, help="JSON file with any of the options below")
    sweep.add_argument("--out", type=Path, required=True, help="run folder to create (data/runs/<id>)")
    groups: dict[str, Any] = {"": sweep}
    for f in SPEC_FIELDS:
        title = f.metadata["group"]
        if title not in groups:
            groups[title] = sweep.add_argument_group(title)
        group = groups[title]
        flag = f.name.replace("_", "-")
        if f.default is True:
            group.add_argument(f"--no-{flag}", dest=f.name, action="store_false", default=None,
                               help=f"do not {f.metadata['help']}")
        else:
            group.add_argument(f"--{flag}", dest=f.name, help=f.metadata["help"])
    return parser


def _raw_spec(args: argparse.Namespace) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    if args.spec:
        try:
            raw = json.loads(args.spec.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise SpecError("spec", f"cannot read {args.spec}: {err}") from None
        if not isinstance(raw, dict):
            raise SpecError("spec", f"{args.spec} must hold a JSON object")
        raw = {k: v for k, v in raw.items() if k not in ("run_id", "created_at")}
    for f in SPEC_FIELDS:
        value = getattr(args, f.name)
        if value is not None:
            raw[f.name] = value
    return raw


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        spec = validate(_raw_spec(args))
        check_out_dir(args.out)
        from runners.sweep import run_sweep  # torch loads only once the spec is known to be good

        cancel.install_handlers()
        status = run_sweep(spec, args.out)
    except (SpecError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before the handler was installed: nothing is written by then
        print(f"cancelled: {args.out} (before the sweep started; nothing written)", file=sys.stderr)
        return EXIT["cancelled"]
    reason = f": {status['error']}" if status["error"] else ""  # a failure says why here, not only in the folder
    print(f"{status['state']}: {args.out}{reason}", file=sys.stderr)
    return EXIT[status["state"]]
