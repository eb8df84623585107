"""One Llama layer's four matmuls, bfloat16 vs one-byte weights, per kernel and row count (GPU only).

    python bench/quant_kernels.py [--model llama-3.1-8b] [--rows 1,2,4,...] [--tune 1,16,64,256]
                                  [--grid tile|one-row|both] [--json PATH]

Times, per row count, each layer's four products (fused QKV, o_proj, fused gate/up, down) through:
bf16 `F.linear`; the Triton kernel (`runners.engines.kernels.quant_kernels`) on fp8 and on int8 weights; and
`torch._scaled_mm` with per-token fp8 activations (quantisation included, as the engine runs it) and
without (the GEMM alone); per-token int8 activations through `torch._int_mm` and through the Triton int8
GEMM (`int8_gemm`); and `quant.linear`, the op the engine runs ("engine fp8/int8": the kernel the row
count calls for), per matrix as well. Before timing, the engine's setup choices are made on these weights
(streaming tiles, split-K included, and the int8 GEMM's tiles per row bucket) and printed. The Triton kernel also runs with the other dot dtype (fp8 in bfloat16, int8
in float16) to show why each dtype multiplies in the one it does. Each variant is one CUDA graph over LAYERS distinct copies of the
weights (more bytes than L2 holds, as in a decode step), replayed REPLAYS times; the median replay
divided by LAYERS is one layer's time. Also each variant's relative error against the float32
product of the dequantised weights, and with `--tune` every configuration of TUNE_GRIDS per matrix (`--grid`:
the 16-row tiles, the one-row kernel's, or both; the numbers behind `quant_kernels.CANDIDATES` and
`ONE_ROW_CANDIDATES`). At one row, lm_head quantised too (fp8, int8), each with its chosen config.
Prints a table; `--json` keeps everything.
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.engines import models  # noqa: E402
from runners.engines.kernels import int8_gemm, quant, quant_kernels
from runners.engines.kernels.quant_kernels import TileConfig  # noqa: E402

LAYERS, REPLAYS = 6, 15
TUNE_GRIDS = {  # rows ≤ 16: one row tile, weights streamed; one row: the CUDA-core kernel, with split-K
    "tile": [TileConfig(16, bn, bk, w, s) for bn, bk, w, s in itertools.product(
        (16, 32, 64), (256, 512, 1024), (4, 8), (3, 5))],
    "one-row": [TileConfig(1, bn, bk, w, 1, sk) for bn, bk, w, sk in itertools.product(
        (8, 16, 32), (256, 512, 1024), (4, 8), (1, 2, 4))] + [TileConfig(1, bn, bk, 4, 3, sk) for bn, bk, sk in
                                                              ((16, 512, 1), (16, 512, 4), (32, 256, 2))],
}


def layer_shapes(model: str) -> dict[str, tuple[int, int]]:
    """(out, in) of the four fused matrices of one layer of a preset."""
    info = models.describe(model, models.model_config(model), "bfloat16")
    qkv = (info.heads + 2 * info.kv_heads) * info.head_dim
    return {"wqkv": (qkv, info.hidden), "wo": (info.hidden, info.heads * info.head_dim),
            "w13": (2 * info.intermediate, info.hidden), "w2": (info.hidden, info.intermediate)}


def graph_ms(fn: Callable[[], object]) -> float:
    """Median ms of one replay of a graph of `fn`."""
    return statistics.median(quant_kernels.graph_replay_ms(fn, REPLAYS))


_QUANTISED_X: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def gemm_only(x: torch.Tensor, w: quant.QuantWeight) -> torch.Tensor:
    """`_scaled_mm` on activations quantised beforehand: the fp8 GEMM's own time."""
    key = (x.data_ptr(), x.shape)
    if key not in _QUANTISED_X:
        _QUANTISED_X[key] = quant.quantize_rows(x, quant.FP8)
    xq, xs = _QUANTISED_X[key]
    return torch._scaled_mm(xq, w.q.t(), scale_a=xs, scale_b=w.scale[None, :], out_dtype=x.dtype,
                            use_fast_accum=quant.FAST_ACCUMULATION)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--rows", default="1,2,4,8,16,32,64,128,256,512")
    parser.add_argument("--tune", default="", help="row counts to tune tiles at, e.g. 1,16,64,256")
    parser.add_argument("--grid", choices=[*TUNE_GRIDS, "both"], default="both", help="which configs --tune times")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    dev = torch.device("cuda")
    shapes = layer_shapes(args.model)
    gen = torch.Generator(device=dev).manual_seed(0)
    bf16 = [{n: torch.randn(o, i, device=dev, generator=gen, dtype=torch.bfloat16) * 0.02 for n, (o, i) in shapes.items()}
            for _ in range(LAYERS)]
    weights = {d: [{n: quant.quantize(w, d) for n, w in layer.items()} for layer in bf16] for d in ("fp8", "int8")}
    chosen = choose_as_setup_does(weights, shapes)
    variants: dict[str, tuple[str, Callable]] = {
        "bf16": ("bf16", lambda x, w: F.linear(x, w)),
        "triton fp8": ("fp8", lambda x, w: quant_kernels.w8_matmul(x, w.q, w.scale)),
        "triton fp8 bf16-dot": ("fp8", lambda x, w: quant_kernels.w8_matmul(x, w.q, w.scale, dot_f16=False)),
        "triton int8": ("int8", lambda x, w: quant_kernels.w8_matmul(x, w.q, w.scale)),
        "triton int8 f16-dot": ("int8", lambda x, w: quant_kernels.w8_matmul(x, w.q, w.scale, dot_f16=True)),
        "scaled_mm fp8": ("fp8", lambda x, w: quant._fp8_activations(x, w.q, w.scale)),
        "scaled_mm gemm only": ("fp8", gemm_only),
        "int_mm int8": ("int8", lambda x, w: quant.int8_product(*quant.quantize_rows(x, torch.int8), w.q, w.scale,
                                                                x.dtype)),
        "triton int8 gemm": ("int8", lambda x, w: quant.int8_product(
            *quant.quantize_rows(x, torch.int8), w.q, w.scale, x.dtype,
            int8_gemm.config_for(x.shape[0], *w.q.shape) or int8_gemm.CANDIDATES[1])),
        "engine fp8": ("fp8", lambda x, w: quant.linear(x, w)),  # the op the engine runs: kernel by row count
        "engine int8": ("int8", lambda x, w: quant.linear(x, w)),
    }
    results: list[dict] = []
    for rows in [int(r) for r in args.rows.split(",")]:
        xs = {n: torch.randn(rows, i, device=dev, dtype=torch.bfloat16) for n, (_, i) in shapes.items()}
        row: dict = {"rows": rows}
        for name, (dtype, fn) in variants.items():
            if name in ("int_mm int8", "triton int8 gemm") and rows <= quant.TENSOR_CORE_ROWS:
                continue  # torch._int_mm takes more than 16 rows only; the engine streams weights there
            layers = bf16 if dtype == "bf16" else weights[dtype]
            row[name] = graph_ms(lambda: [fn(xs[n], layer[n]) for layer in layers for n in shapes]) / LAYERS
            if dtype != "bf16":
                errs = {}
                for n in shapes:
                    ref = xs[n].float() @ quant.dequantize(layers[0][n]).T
                    errs[n] = float((fn(xs[n], layers[0][n]).float() - ref).norm() / ref.norm())
                row[f"{name} err"] = errs
            if name.startswith("engine") or name == "bf16":
                row[f"{name} per matrix"] = {n: graph_ms(lambda: [fn(xs[n], layer[n]) for layer in layers]) / LAYERS
                                             for n in shapes}
        head = torch.randn(models.model_config(args.model).vocab_size, next(iter(shapes.values()))[1], device=dev,
                           dtype=torch.bfloat16)
        row["lm_head bf16"] = graph_ms(lambda: F.linear(xs["wqkv"], head))  # every dtype keeps it bfloat16
        if rows == 1:  # what a one-byte lm_head would take
            for d in ("fp8", "int8"):
                qh = quant.quantize(head, d)
                row[f"lm_head {d} config"] = [list(c) for c in quant_kernels.choose([(qh.q, qh.scale)], torch.bfloat16)]
                row[f"lm_head {d}"] = graph_ms(lambda: quant_kernels.w8_matmul(xs["wqkv"], qh.q, qh.scale))
                del qh
            print("   lm_head ms:", {k: row[k] for k in row if k.startswith("lm_head")}, flush=True)
        del head
        if str(rows) in args.tune.split(","):
            grid = [c for name, g in TUNE_GRIDS.items() if args.grid in (name, "both") for c in g]
            row["tune"] = tune(xs, weights, shapes, grid)
        results.append(row)
        print(" | ".join([f"rows {rows:4d}", f"bf16 {row['bf16']:.4f} ms"]
                         + [f"{k} {row[k] / row['bf16']:.2f}x" for k in variants if k != "bf16" and k in row]), flush=True)
        print("   errors:", {k: {n: round(e, 4) for n, e in v.items()} for k, v in row.items() if k.endswith("err")},
              flush=True)
        print("   per matrix ms:", {k: {n: round(t, 4) for n, t in v.items()} for k, v in row.items()
                                    if k.endswith("per matrix")}, flush=True)
        if "tune" in row:
            for d, per in row["tune"].items():
                print(f"   best {d}:", {n: per[n][:3] for n in per}, flush=True)
                print(f"   best {d} TB/s:", {n: round(shapes[n][0] * shapes[n][1] / per[n][0][0] / 1e9, 2)
                                           for n in per if per[n]}, flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "triton": __import__("triton").__version__, "model": args.model, "shapes": shapes, "default":
            list(quant_kernels.DEFAULT), "candidates": [list(c) for c in quant_kernels.CANDIDATES], "chosen": chosen}
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1))


def choose_as_setup_does(weights: dict, shapes: dict) -> dict:
    """The engine's setup choices on these weights: each matrix's streaming tile (fp8 and int8) and the int8
    GEMM's tiles per row bucket (None: `_int_mm`), so the variants below run what a sweep would."""
    chosen: dict = {}
    for dtype, layers in weights.items():
        for n in shapes:
            pairs = [(layer[n].q, layer[n].scale) for layer in layers]
            chosen[f"{dtype} {n} stream"] = [list(c) for c in quant_kernels.choose(pairs, torch.bfloat16)]
            if dtype == "int8":
                chosen[f"int8 {n} gemm"] = [c and list(c) for c in quant.choose_int8_gemm(pairs, torch.bfloat16)]
    print("   chosen:", chosen, flush=True)
    return chosen


def precompile(xs: dict, weights: dict, shapes: dict, grid: list[TileConfig]) -> None:
    """Compile every (config, dtype, K) in parallel threads (ptxas runs as a subprocess), so tuning
    times kernels instead of waiting on one compile after another."""
    jobs = [(c, layers[0][n], xs[n]) for c in grid for layers in weights.values() for n in shapes]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda job: _try(lambda: quant_kernels.w8_matmul(job[2], job[1].q, job[1].scale, job[0])), jobs))
    torch.cuda.synchronize()


def _try(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception as err:  # reported again when tune() times it
        print("   precompile failed:", type(err).__name__, str(err)[:120], flush=True)


def tune(xs: dict, weights: dict, shapes: dict, grid: list[TileConfig]) -> dict[str, dict[str, list]]:
    """Per dtype and matrix, every config of `grid`'s ms for that matrix, fastest first (failures skipped)."""
    precompile(xs, weights, shapes, grid)
    out: dict[str, dict[str, list]] = {}
    for dtype, layers in weights.items():
        out[dtype] = {}
        for n in shapes:
            timed = []
            for c in grid:
                try:
                    ms = graph_ms(lambda: [quant_kernels.w8_matmul(xs[n], layer[n].q, layer[n].scale, c)
                                           for layer in layers]) / LAYERS
                except Exception as err:  # a tile that does not fit shared memory: not a candidate
                    print("   skip", c, type(err).__name__, flush=True)
                    continue
                timed.append((round(ms, 5), list(c)))
            out[dtype][n] = sorted(timed)
    return out


if __name__ == "__main__":
    main()
