"""Where quantisation error comes from: every matrix of every layer, and the whole model, per kernel.

    python bench/quant_layers.py [--model llama-3.1-8b] [--device cuda] [--json PATH]

Runs the bfloat16 FastDecoder's prefill over the accuracy check's prompts (4 × 32 tokens) once,
recording the input of each of the 32 × 4 matrix products. Then, per kernel variant, each product is
recomputed from that same bfloat16 input with the quantised matrix, and its relative error against
the bfloat16 product is kept (so an error here is that matrix's own, not one carried in from earlier
layers). Last, the whole prefill runs with every matrix quantised, per variant, and its last-position
logits are compared with bfloat16 (relative L2, which the old guard reported, and cosine). Variants:
fp8 and int8 weights through the Triton kernel; int8 weights with per-token int8 activations through
`torch._int_mm`; fp8 weights with per-token fp8 activations through `torch._scaled_mm` with fast
accumulation on (what the engine runs) and off.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.engines import models  # noqa: E402
from runners.engines import fast_model  # noqa: E402
from runners.engines.fast_model import FastDecoder  # noqa: E402
from runners.engines.fast_quant import GUARD_PROMPT_LEN, GUARD_ROWS, MATRICES  # noqa: E402
from runners.engines.kernels import quant
from runners.engines.ragged import Chunk, pack  # noqa: E402

# name: (dtype to quantise to, tensor_core_rows, fast accumulation)
VARIANTS = {"triton fp8": ("fp8", sys.maxsize, True), "triton int8": ("int8", sys.maxsize, True),
            "int_mm int8": ("int8", 0, True),
            "scaled_mm fp8 fast-acc": ("fp8", 0, True), "scaled_mm fp8": ("fp8", 0, False)}


def prefill_logits(decoder: FastDecoder, prompts: torch.Tensor) -> torch.Tensor:
    state = decoder.new_state(prompts.shape[0], 64, 1)
    chunks = [Chunk(row, 0, p, emit=len(p) - 1) for row, p in enumerate(prompts.tolist())]
    return decoder.prefill(pack(chunks, decoder.device), state).float()


def record_inputs(decoder: FastDecoder, prompts: torch.Tensor) -> list[torch.Tensor]:
    """The input of each decoder matrix product during a bfloat16 prefill, in layer order."""
    seen: list[torch.Tensor] = []
    plain = fast_model.linear

    def recording(x, w, bias=None):
        seen.append(x.detach().clone())
        return plain(x, w, bias)

    fast_model.linear = recording
    try:
        prefill_logits(decoder, prompts)
    finally:
        fast_model.linear = plain
    return seen


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    loaded = models.load(args.model, "bfloat16", torch.device(args.device))
    decoder = FastDecoder(loaded.model, loaded.config)
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(1, decoder.embed.shape[0], (GUARD_ROWS, GUARD_PROMPT_LEN), generator=gen)
    inputs = record_inputs(decoder, prompts)
    bf16 = [{n: getattr(w, n) for n in MATRICES} for w in decoder.layers]
    reference = prefill_logits(decoder, prompts)
    report: dict = {"model": args.model, "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "torch": torch.__version__,
                    "layers": {}, "model_logits": {}, "inputs": []}
    for i, x in enumerate(inputs):
        name = MATRICES[i % len(MATRICES)]
        report["inputs"].append({"layer": i // len(MATRICES), "matrix": name, "amax": float(x.abs().max()),
                                 "rms": float(x.float().pow(2).mean().sqrt())})
    for variant, (dtype, tc_rows, fast) in VARIANTS.items():
        quant.FAST_ACCUMULATION = fast
        per_matrix: list[dict] = []
        for i, x in enumerate(inputs):
            layer, name = divmod(i, len(MATRICES))
            w = bf16[layer][MATRICES[name]]
            q = quant.quantize(w, dtype)._replace(tensor_core_rows=tc_rows)
            per_matrix.append({"layer": layer, "matrix": MATRICES[name], "err": rel(quant.linear(x, q), F.linear(x, w))})
        for weights, layer in zip(decoder.layers, bf16):
            for n in MATRICES:
                setattr(weights, n, quant.quantize(layer[n], dtype)._replace(tensor_core_rows=tc_rows))
        logits = prefill_logits(decoder, prompts)
        for weights, layer in zip(decoder.layers, bf16):
            for n in MATRICES:
                setattr(weights, n, layer[n])
        report["layers"][variant] = per_matrix
        report["model_logits"][variant] = {"rel_l2": rel(logits, reference),
                                           "cosine": float(F.cosine_similarity(logits, reference, dim=-1).mean())}
        by_matrix = {n: statistics.mean(m["err"] for m in per_matrix if m["matrix"] == n) for n in MATRICES}
        worst = max(per_matrix, key=lambda m: m["err"])
        print(f"{variant:24s} logits rel L2 {report['model_logits'][variant]['rel_l2']:.4f} cosine "
              f"{report['model_logits'][variant]['cosine']:.4f} | mean per-matrix error "
              + " ".join(f"{n} {e:.4f}" for n, e in by_matrix.items())
              + f" | worst layer {worst['layer']} {worst['matrix']} {worst['err']:.4f}", flush=True)
    quant.FAST_ACCUMULATION = False
    amax = max(report["inputs"], key=lambda r: r["amax"])
    print(f"largest input: layer {amax['layer']} {amax['matrix']} amax {amax['amax']:.1f} rms {amax['rms']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
