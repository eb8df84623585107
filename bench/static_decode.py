"""The fast engine's static decode step on a GPU as a batch's KV fills: what one step costs at the start, the
middle and the end of a batch's decode, beside the roofline of what its rows hold and of the whole cache.

Why: up to version 2 the static step attended over the whole cache its shape set up (a masked matmul), so it
cost the same from the first step to the last; from version 3 it reads each row up to its position. For each
batch size this sets the shape up (prompt P, output N: the cache holds P + N a slot), then replays the
captured step with every row at position p (P, P + N/2, P + N - 1), timed with CUDA events (median of
REPLAYS: runners.engines.fast.replay_ms). Floors at the copy rate calibrated in the same call: the weights
plus the rows' K/V up to p (B × (p + 1) tokens), and the weights plus the whole cache. The fast 2 column of
docs/benchmarks.md (twenty-fourth session) came from this script's first version, which timed its replays
itself, run over a copy of the previous commit's `runners/` on the same card.

    python3 bench/static_decode.py [--model llama-3.1-8b] [--batch-sizes 1,16,64] [--prompt-len 512]
                                   [--output-len 2048]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runners.engines.fast import FastEngine, replay_ms  # noqa: E402
from runners.engines.models import load  # noqa: E402
from runners.telemetry.calibrate import calibrate  # noqa: E402

REPLAYS = 30


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--batch-sizes", default="1,16,64")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=2048)
    args = ap.parse_args()
    device = torch.device("cuda")
    bandwidth = calibrate(device, torch.bfloat16)["copy_bytes_per_s"]
    loaded = load(args.model, "bfloat16", device)
    engine = FastEngine(loaded)
    info, P, N = loaded.info, args.prompt_len, args.output_len
    print(f"{engine.version()} on {torch.cuda.get_device_name()}; {args.model} bf16; copy {bandwidth / 1e12:.2f} TB/s; "
          f"prompt {P}, output {N}")
    print("| batch | position | step ms | floor, rows' KV ms | × | floor, whole cache ms | whole cache GiB |")
    print("|---|---|---|---|---|---|---|")
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        engine.setup(batch, P, N)
        whole_ms = (info.weight_bytes + engine.state.kv_bytes) / bandwidth * 1e3
        for pos in (P, P + N // 2, P + N - 1):
            step = replay_ms(engine.graph, engine.state, pos, REPLAYS)
            live_ms = (info.weight_bytes + batch * (pos + 1) * info.kv_bytes_per_token) / bandwidth * 1e3
            print(f"| {batch} | {pos} | {step:.2f} | {live_ms:.2f} | {step / live_ms:.2f} | {whole_ms:.2f} | "
                  f"{engine.state.kv_bytes / 2**30:.1f} |", flush=True)
        engine.release()


if __name__ == "__main__":
    main()
