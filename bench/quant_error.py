"""Why fp8's logit cosine falls so far below int8's on a random-weight preset, measured on CPU.

    python bench/quant_error.py [--model llama-3.2-1b] [--layers 0,4,8,12,15] [--json PATH]

Three steps, each printed with its numbers (docs/quantisation.md quotes them):
1. format: the relative RMS error of quantising one matrix of the preset's own random weights per output
   channel to int8 and to e4m3 fp8, and of quantising its real activations per token;
2. products: each decoder matrix product's own error on the model's weights and real activations, per
   kernel path: the runner's code (runners.engines.quant_error, as every quantised run records it), once with
   bfloat16 activations (weight-only: the small-batch path) and once with per-token one-byte activations;
3. compounding: the last-position logits of one bfloat16 prefill (the accuracy check's 4 × 32 prompts)
   against the same prefill with every matrix quantised, with one layer's matrices only, and with the
   first k layers'; relative L2 r and cosine, against 1/√(1 + r²) (the cosine of an error orthogonal to
   the logits), and the residual stream's RMS after each layer.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.engines import models  # noqa: E402
from runners.engines.fast_model import FastDecoder  # noqa: E402
from runners.engines.fast_quant import MATRICES, reference_run  # noqa: E402
from runners.engines.kernels import quant
from runners.engines.quant_error import layer_errors, relative_error  # noqa: E402
from runners.engines.ragged import Chunk, pack  # noqa: E402

WEIGHT_ONLY, ACTIVATIONS = sys.maxsize, 0  # tensor_core_rows: never / always quantise activations too
FORMATS = ("int8", "fp8")


def format_error(w: torch.Tensor, x: torch.Tensor) -> dict[str, float]:
    """Relative RMS error of a weight matrix quantised per output channel and of activations per token."""
    found = {}
    for dtype in FORMATS:
        found[f"{dtype} weights"] = relative_error(quant.dequantize(quant.quantize(w, dtype)), w.float())
        qtype = torch.int8 if dtype == "int8" else quant.FP8
        xq, scale = quant.quantize_rows(x, qtype)
        found[f"{dtype} activations"] = relative_error(xq.float() * scale, x.float())
    rows = w.float().abs().amax(dim=1) / w.float().pow(2).mean(dim=1).sqrt()
    found["weight row amax / rms"] = float(rows.mean())
    found["int8 weights, uniform-step theory"] = float(rows.mean()) / 127 / math.sqrt(12)
    tokens = x.float().abs().amax(dim=1) / x.float().pow(2).mean(dim=1).sqrt()
    found["activation row amax / rms (mean)"] = float(tokens.mean())
    return found


def logits(decoder: FastDecoder, prompts: torch.Tensor) -> torch.Tensor:
    """Each prompt's last-position logits from one packed prefill."""
    state = decoder.new_state(prompts.shape[0], 64, 1)
    chunks = [Chunk(row, 0, p, emit=len(p) - 1) for row, p in enumerate(prompts.tolist())]
    return decoder.prefill(pack(chunks, decoder.device), state).float()


def compare(got: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    r = relative_error(got, ref)
    return {"rel_l2": r, "cosine": float(F.cosine_similarity(got, ref, dim=-1).mean()),
            "orthogonal_cosine": 1 / math.sqrt(1 + r * r)}


def quantised_run(decoder: FastDecoder, bf16: list[dict], prompts: torch.Tensor, dtype: str, layers: list[int],
                  rows: int) -> torch.Tensor:
    """Logits with `layers`' matrices quantised (through the path `rows` selects), then bfloat16 again."""
    for i in layers:
        for name in MATRICES:
            setattr(decoder.layers[i], name, quant.quantize(bf16[i][name], dtype)._replace(tensor_core_rows=rows))
    try:
        return logits(decoder, prompts)
    finally:
        for i in layers:
            for name in MATRICES:
                setattr(decoder.layers[i], name, bf16[i][name])


def residual_rms(loaded: models.LoadedModel, prompts: torch.Tensor) -> list[float]:
    """RMS of the residual stream after the embedding and after each layer (the HF forward, same weights)."""
    out = loaded.model(prompts.to(loaded.device), output_hidden_states=True)
    return [float(h.float().pow(2).mean().sqrt()) for h in out.hidden_states[:-1]]  # the last is normed


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.2-1b")
    parser.add_argument("--layers", default="0,4,8,12,15", help="layers quantised alone in step 3")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    loaded = models.load(args.model, "bfloat16", torch.device("cpu"))
    decoder = FastDecoder(loaded.model, loaded.config)
    reference = reference_run(decoder)
    report: dict = {"model": args.model, "torch": torch.__version__}

    first = reference.products[:len(MATRICES)]
    report["format"] = {p.matrix: format_error(getattr(decoder.layers[0], p.matrix), p.x) for p in first}
    for name, found in report["format"].items():
        print(f"1 format, layer 0 {name}: " + ", ".join(f"{k} {v:.4f}" for k, v in found.items()), flush=True)

    bf16 = [{n: getattr(layer, n) for n in MATRICES} for layer in decoder.layers]
    report["products"] = {}
    for dtype in FORMATS:
        for path, rows in (("weight-only", WEIGHT_ONLY), ("activations too", ACTIVATIONS)):
            weight_of = {(i, n): quant.quantize(w, dtype)._replace(tensor_core_rows=rows)
                         for i, layer in enumerate(bf16) for n, w in layer.items()}
            rows_found = layer_errors(reference.products, weight_of, [16])
            errors = [e["rel_error"] for e in rows_found]
            by_matrix = {n: statistics.median(e["rel_error"] for e in rows_found if e["matrix"] == n) for n in MATRICES}
            report["products"][f"{dtype} {path}"] = {"median": statistics.median(errors), "max": max(errors),
                                                     "min": min(errors), "by_matrix": by_matrix}
            print(f"2 products, {dtype} {path}: median {statistics.median(errors):.4f} (min {min(errors):.4f}, "
                  f"max {max(errors):.4f}) " + " ".join(f"{n} {e:.4f}" for n, e in by_matrix.items()), flush=True)
    reference.products.clear()

    prompts = reference.prompts
    base = logits(decoder, prompts)
    n_layers = len(decoder.layers)
    report["residual_rms"] = residual_rms(loaded, prompts)
    print("3 residual RMS after embedding and each layer: "
          + " ".join(f"{v:.3f}" for v in report["residual_rms"]), flush=True)
    report["compounding"] = {}
    alone = [int(i) for i in args.layers.split(",")]
    prefixes = sorted({1, n_layers // 4, n_layers // 2, n_layers})
    for dtype in FORMATS:
        for path, rows in (("weight-only", WEIGHT_ONLY), ("activations too", ACTIVATIONS)):
            found = {"all": compare(quantised_run(decoder, bf16, prompts, dtype, list(range(n_layers)), rows), base)}
            if path == "weight-only":
                found |= {f"layer {i} alone": compare(quantised_run(decoder, bf16, prompts, dtype, [i], rows), base)
                          for i in alone}
                found |= {f"first {k}": compare(quantised_run(decoder, bf16, prompts, dtype, list(range(k)), rows),
                                                base) for k in prefixes[:-1]}
            report["compounding"][f"{dtype} {path}"] = found
            for what, c in found.items():
                print(f"3 compounding, {dtype} {path}, {what}: logits rel L2 {c['rel_l2']:.4f} cosine "
                      f"{c['cosine']:.4f} (1/sqrt(1+r^2) {c['orthogonal_cosine']:.4f})", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
