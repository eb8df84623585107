"""Per-layer error of each quantised product against bfloat16's, on the model's own weights and activations.

Why: the logits cosine and greedy agreement of the accuracy check compound 4 × layers products through the
whole network, and on random weights near-flat logits turn any change into flipped tokens
(docs/quantisation.md). The error of each product alone, fed the activations the model really produces,
is what the weight format costs and compares with published figures (per-channel int8 ≈ 0.5–1 %, e4m3
fp8 ≈ 2–4 %).

How: while the bfloat16 model runs the accuracy check's prefill (before quantising), `ProductRecorder`
keeps the input of each decoder matrix product and bfloat16's product. After quantising and warming the
kernels, each input goes through the quantised matrix by every kernel path the run's steps can take
(`runners.engines.kernels.quant.linear`, the op the engine calls, split into products of that path's row count), and

    error = ‖y_quantised − y_bfloat16‖ / ‖y_bfloat16‖     (Frobenius, over every recorded token)

per layer and matrix. All of it runs in setup, never inside a measured step.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

from runners.engines.kernels.quant import QuantWeight, kernel_for, linear
from runners.engines.quant_layout import product_name

LAYER_ERRORS = "quant_layer_errors"  # the engine facts' key of the per-product rows; the sweep writes them to
                                     # quant_error.parquet, not into model.json


@dataclass
class Product:
    """One decoder matrix product as the bfloat16 prefill ran it."""

    layer: int
    matrix: str
    x: Tensor  # [tokens, in]: its input
    y: Tensor  # [tokens, out]: bfloat16's product, without bias


class ProductRecorder(TorchFunctionMode):
    """Records every `F.linear` whose weight is one of `weights` (the tensor object itself → its layer and
    matrix name). A function mode, so FastDecoder's own eager prefill is recorded as it runs, unchanged."""

    def __init__(self, weights: dict[int, tuple[Tensor, int, str]]) -> None:
        super().__init__()
        self.weights = weights
        self.products: list[Product] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (torch's signature)
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is F.linear:
            x, w = args[0], args[1] if len(args) > 1 else kwargs["weight"]
            known = self.weights.get(id(w))
            if known is not None and known[0] is w:
                bias = args[2] if len(args) > 2 else kwargs.get("bias")
                y = out if bias is None else F.linear(x, w)
                self.products.append(Product(known[1], known[2], _rows(x), _rows(y)))
        return out


def _rows(t: Tensor) -> Tensor:
    return t.detach().reshape(-1, t.shape[-1]).clone()


def relative_error(got: Tensor, reference: Tensor) -> float:
    """‖got − reference‖ / ‖reference‖ over every element, computed in float32."""
    ref = reference.float()
    return float(torch.linalg.vector_norm(got.float() - ref) / torch.linalg.vector_norm(ref))


def product_error(product: Product, weight: QuantWeight, rows: int) -> float:
    """The product's error through the kernel an M = `rows` product runs: its tokens go through
    `linear` `rows` at a time (repeated when fewer were recorded; a last partial group is left out, so
    every product takes the same kernel)."""
    n = product.x.shape[0]
    used = torch.arange(max(n, rows) // rows * rows, device=product.x.device) % n
    x, y = product.x[used], product.y[used]
    got = torch.cat([linear(chunk, weight) for chunk in x.split(rows)])
    return relative_error(got, y)


def layer_errors(products: list[Product], weight_of: dict[tuple[int, str], QuantWeight],
                 paths: list[int]) -> list[dict[str, Any]]:
    """One row per kernel path (its row count) and product: the quant_error.parquet rows
    (runners/results/schemas.py QUANT_ERROR)."""
    found = []
    for rows in paths:
        for p in products:
            w = weight_of[(p.layer, p.matrix)]
            found.append({"rows": rows, "kernel": kernel_for(rows, w.tensor_core_rows, p.x.is_cuda, w.q),
                          "layer": p.layer, "matrix": p.matrix, "rel_error": product_error(p, w, rows)})
    return found


def path_summary(errors: list[dict[str, Any]], rows: int) -> dict[str, Any]:
    """Median and worst product error of one kernel path, and where the worst is."""
    mine = [e for e in errors if e["rows"] == rows]
    worst = max(mine, key=lambda e: e["rel_error"])
    return {"layer_error_median": statistics.median(e["rel_error"] for e in mine),
            "layer_error_max": worst["rel_error"], "layer_error_worst": product_name(worst["layer"], worst["matrix"])}


def model_summary(errors: list[dict[str, Any]]) -> dict[str, float]:
    """model.json's two numbers: the largest path median and the worst product over every path."""
    medians = [path_summary(errors, rows)["layer_error_median"] for rows in sorted({e["rows"] for e in errors})]
    return {"quant_layer_error_median": max(medians),
            "quant_layer_error_max": max(e["rel_error"] for e in errors)}
