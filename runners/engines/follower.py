"""`python -m runners.engines.follower`: ranks 1..K-1 of a multi-process sweep
(started by runners.engines.parallel.Team).

A follower loads the same model on its device, builds its engine and runs rank 0's commands. It
never writes a file: results go back to rank 0 over the control channel.
"""
from __future__ import annotations

import argparse
import json

import torch
import torch.distributed as dist

from runners.engines import models, parallel
from runners.engines.group import local_engine, serve
from runners.spec import validate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.engines.follower", allow_abbrev=False)
    for name in ("rank", "world", "port", "parent"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--device", required=True, help="the sweep's device (rank 0's)")
    parser.add_argument("--spec", required=True, help="the validated spec as JSON")
    args = parser.parse_args(argv)
    parallel.die_with_parent(args.parent)
    spec = validate(json.loads(args.spec))
    device = parallel.rank_device(torch.device(args.device), args.rank)
    group = parallel.connect(args.rank, args.world, args.port, device, spec.tensor_parallel > 1)
    loaded = models.load(spec.model, spec.dtype, device, spec.seed, spec.quantize_lm_head)
    serve(local_engine(spec, loaded, group), group)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
