"""Which dtypes quantise weights, what each means, and how many bytes the quantised weights take.

Torch-free, so the spec, the New sweep form and `batchscope.analysis.model_facts` share one formula
with `runners.engines.models.describe()`. Quantised dtypes quantise only the decoder's linear matrices (fused
QKV, output projection, fused gate/up, down projection) to one byte per element plus one float32 scale
per output row; embeddings, norms and biases stay bfloat16, and so do activations and the KV cache. The
output head (lm_head) stays bfloat16 unless the sweep asks for it too (`quantize_lm_head`): vLLM keeps it
bfloat16, gpt-fast and torchao quantise it, and at batch 1 on an 8B model it is a tenth of the bytes a decode
step reads (docs/quantisation.md).
"""
from __future__ import annotations

QUANT_DTYPES: dict[str, str] = {
    "fp8": "fp8 e4m3 weights with a scale per output channel. Up to 16 rows a Triton kernel streams the fp8 "
           "weights with bfloat16 activations; above, each token's activations are scaled to fp8 and the "
           "product runs on fp8 tensor cores. KV cache stays bfloat16. Needs a GPU with fp8 (compute "
           "capability ≥ 8.9) or runs slowly on CPU.",
    "fp8-dynamic": "fp8 e4m3 weights and fp8 activations (a scale per token, computed each step) at every "
                   "row count, multiplied on fp8 tensor cores; KV cache stays bfloat16. Needs a GPU with fp8 "
                   "(compute capability ≥ 8.9).",
    "int8": "int8 weights with a scale per output channel. Up to 16 rows a Triton kernel streams them with "
            "bfloat16 activations (weight-only); above, each token's activations are scaled to int8 and the "
            "product runs on int8 tensor cores. KV cache stays bfloat16. Runs on CPU and CUDA.",
}
QUANT_ENGINES = ("fast",)
# each quantised matrix's rows and columns are multiples of this (torch._int_mm's and torch._scaled_mm's shape rules)
DIMENSION_MULTIPLE = {"int8": 8, "fp8": 16, "fp8-dynamic": 16}
MATRICES = ("wqkv", "wo", "w13", "w2")  # the quantised matrices of each decoder layer, in the order a layer runs them
LM_HEAD = "lm_head"  # the output head's name where per-product errors are listed (quant_error.parquet)
ACTIVATION_BYTES = 2  # bfloat16
QUANT_ELEMENT_BYTES = 1
SCALE_BYTES = 4  # float32: what torch._scaled_mm's rowwise scales must be


def quantized_weight_bytes(params: int, matrix_elements: int, matrix_rows: int) -> int:
    """Bytes of a model whose `matrix_elements` linear weights (over `matrix_rows` output rows) are
    quantised and whose other `params - matrix_elements` parameters stay bfloat16."""
    return (matrix_elements * QUANT_ELEMENT_BYTES + matrix_rows * SCALE_BYTES
            + (params - matrix_elements) * ACTIVATION_BYTES)


def quantized_model_bytes(params: int, layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int,
                          intermediate: int, vocab: int, tied: bool, lm_head: bool) -> int:
    """Bytes of a quantised model (`params` as counted with a tied head once). A quantised lm_head's
    vocab × hidden elements join the one-byte matrices; a tied one gets its own one-byte copy, since the
    embedding lookup keeps reading the bfloat16 table."""
    elements, rows = decoder_matrices(layers, hidden, heads, kv_heads, head_dim, intermediate)
    if lm_head and tied:
        return quantized_weight_bytes(params, elements, rows) + vocab * (hidden * QUANT_ELEMENT_BYTES + SCALE_BYTES)
    if lm_head:
        return quantized_weight_bytes(params, elements + vocab * hidden, rows + vocab)
    return quantized_weight_bytes(params, elements, rows)


def decoder_matrices(layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int,
                     intermediate: int) -> tuple[int, int]:
    """(elements, output rows) of every quantised matrix: per layer wqkv, wo, w13 and w2."""
    qkv_rows = (heads + 2 * kv_heads) * head_dim
    elements = qkv_rows * hidden + hidden * heads * head_dim + 2 * intermediate * hidden + hidden * intermediate
    rows = qkv_rows + hidden + 2 * intermediate + hidden
    return layers * elements, layers * rows


def product_name(layer: int, matrix: str) -> str:
    """`layer 3 w2`, or `lm_head` alone: its layer number (one past the last) names no decoder layer."""
    return matrix if matrix == LM_HEAD else f"layer {layer} {matrix}"
