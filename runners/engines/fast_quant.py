"""Quantise a FastDecoder's matrices at load, free their bfloat16 copies, and measure the accuracy cost.

The accuracy check compares the quantised model with the bfloat16 one on the same weights, on the path
the measurement uses: before quantising, a bfloat16 run of GUARD_ROWS random prompts records the logits
and greedy tokens of GUARD_STEPS decode steps; after quantising (and compiling), the engine's own decode
step (the captured graph on a GPU) replays them teacher-forced: each step is fed the bfloat16 token, so
one early disagreement does not make every later step disagree. Per decode step and row it keeps the
cosine similarity of the logits and whether the argmax is the bfloat16 token. The switch to tensor cores
above `tensor_core_rows` rows gets its own check, with the prompts repeated past it. The bfloat16 prefill
also records each matrix product's input, so every product's own error is measured per kernel path
(runners.engines.quant_error): the figure that says what the format costs, where the end-to-end ones on random
weights do not.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from runners.engines.fast_model import DecodeState, FastDecoder
from runners.engines.kernels.quant import QuantWeight, choose_int8_gemm, kernel_for, linear, quantize
from runners.engines.kv_layout import cache_len
from runners.engines.quant_error import (LAYER_ERRORS, Product, ProductRecorder, layer_errors, model_summary,
                                         path_summary)
from runners.engines.quant_layout import LM_HEAD, MATRICES
from runners.engines.ragged import Chunk, pack

GUARD_ROWS, GUARD_PROMPT_LEN, GUARD_STEPS = 4, 32, 32
StepRunner = Callable[[DecodeState], Callable[[], Tensor]]  # warm (and capture) a state; returns its step


@dataclass
class Reference:
    """What the bfloat16 model did on the guard prompts."""

    prompts: Tensor  # [GUARD_ROWS, GUARD_PROMPT_LEN] token ids
    tokens: Tensor  # [GUARD_ROWS, 1 + GUARD_STEPS]: the prefill's greedy token, then each decode step's
    logits: Tensor  # [GUARD_STEPS, GUARD_ROWS, vocab] float32: each decode step's
    products: list[Product]  # each decoder matrix product of the prefill, with its input (runners.engines.quant_error)


@torch.no_grad()
def quantize_decoder(decoder: FastDecoder, hf_model: torch.nn.Module, dtype: str, lm_head: bool = False) -> None:
    """Replace each layer's four matrices (and with `lm_head` the output head) with QuantWeights, layer by
    layer, and empty the HF model's linear weights (they share storage with the fused matrices), so peak
    memory is the bfloat16 model plus one layer and the bfloat16 copies are gone afterwards. A head tied
    to the embeddings keeps its bfloat16 table for the lookup. The HF model cannot run after this."""
    for weights, layer in zip(decoder.layers, hf_model.model.layers):
        for name in MATRICES:
            setattr(weights, name, quantize(getattr(weights, name), dtype))
        for module in layer.modules():
            if isinstance(module, torch.nn.Linear):
                _empty(module)
    if lm_head:
        head = decoder.lm_head
        decoder.lm_head = quantize(head, dtype)
        if head.data_ptr() != decoder.embed.data_ptr():
            _empty(hf_model.lm_head)


def _empty(module: torch.nn.Module) -> None:
    module.weight.data = torch.empty(0, dtype=module.weight.dtype, device=module.weight.device)


def decoder_weight_bytes(decoder: FastDecoder) -> int:
    """Bytes of every tensor the decoder reads, each storage counted once (tied embeddings)."""
    tensors: list[Tensor] = []
    for value in [decoder.embed, decoder.norm, decoder.lm_head,
                  *(value for weights in decoder.layers for value in vars(weights).values())]:
        if isinstance(value, QuantWeight):
            tensors += [value.q, value.scale]
        elif isinstance(value, Tensor):
            tensors.append(value)
    seen: dict[int, int] = {}
    for t in tensors:
        seen[t.data_ptr()] = max(seen.get(t.data_ptr(), 0), t.numel() * t.element_size())
    return sum(seen.values())


# inference mode as the engine's own states: a compiled layer guards on its inputs' dispatch keys, so a state made
# under no_grad here recompiled every compiled layer when the measured run began (issue 36)
@torch.inference_mode()
def reference_run(decoder: FastDecoder, lm_head: bool = False, seed: int = 0) -> Reference:
    """The bfloat16 decoder's greedy run over the guard prompts (eager; call before quantising), recording
    the products of every matrix the dtype will quantise (lm_head's with `lm_head`)."""
    gen = torch.Generator().manual_seed(seed)
    prompts = torch.randint(1, decoder.embed.shape[0], (GUARD_ROWS, GUARD_PROMPT_LEN), generator=gen)
    state = _fresh_state(decoder, GUARD_ROWS)
    by_identity = {id(w): (w, i, name) for (i, name), w in quantised_matrices(decoder, lm_head).items()}
    with ProductRecorder(by_identity) as recorder:
        _prefill(decoder, state, prompts)
    logits = torch.stack([decoder.decode_step(state).float() for _ in range(GUARD_STEPS)])
    return Reference(prompts, state.out[:, :1 + GUARD_STEPS].cpu(), logits, recorder.products)


def quantised_matrices(decoder: FastDecoder, lm_head: bool) -> dict[tuple[int, str], Tensor | QuantWeight]:
    """Each matrix the dtype quantises, by (layer, name): every layer's four, and with `lm_head` the head as layer
    `len(decoder.layers)` (it runs after the last layer). bfloat16 tensors before quantising, QuantWeights after."""
    found: dict[tuple[int, str], Tensor | QuantWeight] = {
        (i, name): getattr(layer, name) for i, layer in enumerate(decoder.layers) for name in MATRICES}
    if lm_head:
        found[(len(decoder.layers), LM_HEAD)] = decoder.lm_head
    return found


@torch.inference_mode()
def accuracy(decoder: FastDecoder, reference: Reference, rows: int, step_runner: StepRunner) -> dict[str, Any]:
    """Teacher-forced decode of the reference prompts (repeated to `rows` rows) on the quantised decoder
    through `step_runner`'s step: the logits' cosine similarity to bfloat16 (mean and worst over steps
    and rows) and the share of steps whose greedy token is bfloat16's."""
    repeats = rows // GUARD_ROWS
    state = _fresh_state(decoder, rows)
    step = step_runner(state)  # warms and captures on this state's buffers before the prefill fills them
    state.pos.zero_()
    _prefill(decoder, state, reference.prompts.repeat(repeats, 1))
    ref_tokens = reference.tokens.to(decoder.device).repeat(repeats, 1)
    cosines, agree = [], []
    for k in range(GUARD_STEPS):
        state.tokens.copy_(ref_tokens[:, k])
        logits = step().float()
        cosines.append(F.cosine_similarity(logits, reference.logits[k].repeat(repeats, 1), dim=-1))
        agree.append(logits.argmax(dim=-1) == ref_tokens[:, k + 1])
    cosine, agreed = torch.stack(cosines), torch.stack(agree)
    weight = decoder.layers[0].wqkv
    return {"rows": rows, "kernel": kernel_for(rows, weight.tensor_core_rows, decoder.device.type == "cuda", weight.q),
            "logits_cosine": float(cosine.mean()), "logits_cosine_min": float(cosine.min()),
            "token_agreement": float(agreed.float().mean())}


def guard_rows(tensor_core_rows: int) -> list[int]:
    """Row counts that reach every kernel the decode step can use: the guard batch, and past the
    tensor-core switch when it lies above the guard batch."""
    rows = [GUARD_ROWS]
    if tensor_core_rows >= GUARD_ROWS:
        rows.append(-(-(tensor_core_rows + 1) // GUARD_ROWS) * GUARD_ROWS)
    return rows


def quantize_with_guard(decoder: FastDecoder, hf_model: torch.nn.Module, dtype: str, lm_head: bool,
                        step_runner: StepRunner, prepare: Callable[[], None]) -> dict[str, Any]:
    """Record the bfloat16 reference, quantise in place (lm_head too with `lm_head`), `prepare` the decoder
    (compile), warm the kernels (choosing the Triton tiles), measure each product's error per kernel path,
    then check every kernel path end to end against the reference; returns model.json's accuracy fields, the
    tiles, and under LAYER_ERRORS the per-product rows (quant_error.parquet)."""
    reference = reference_run(decoder, lm_head)
    quantize_decoder(decoder, hf_model, dtype, lm_head)
    prepare()
    tiles = warm_kernels(decoder, lm_head)
    paths = guard_rows(decoder.layers[0].wqkv.tensor_core_rows)
    with torch.inference_mode():  # the recorded products are inference tensors
        errors = layer_errors(reference.products, quantised_matrices(decoder, lm_head), paths)
    reference.products.clear()  # their inputs and outputs take memory the graphs below can use
    checks = [{**accuracy(decoder, reference, rows, step_runner), **path_summary(errors, rows)} for rows in paths]
    return {"quant_logits_cosine": min(c["logits_cosine"] for c in checks),
            "quant_token_agreement": min(c["token_agreement"] for c in checks),
            "quant_accuracy": checks, "quant_tiles": tiles or None, **model_summary(errors), LAYER_ERRORS: errors}


def warm_kernels(decoder: FastDecoder, lm_head: bool) -> dict[str, list | dict]:
    """Choose each quantised matrix's (lm_head's too with `lm_head`) Triton tile on this GPU (and, for int8, the
    tensor-core kernel per row bucket),
    then run every matrix once on each side of the tensor-core switch, so every kernel compiles (and cuBLAS
    picks its one-byte algorithm) in setup, never inside a measured step. Returns the chosen tiles
    (model.json's quant_tiles: the streaming tile for 2…16 rows and the config for one row, and under NAME int8
    the GEMM tiles per bucket, null for `_int_mm`)."""
    if decoder.device.type != "cuda":
        return {}
    from runners.engines.kernels import quant_kernels
    tiles: dict[str, list | dict] = {}
    by_name: dict[str, list[QuantWeight]] = {}
    for (_, name), weight in quantised_matrices(decoder, lm_head).items():
        by_name.setdefault(name, []).append(weight)
    for name, weights in by_name.items():
        w = weights[0]
        pairs = [(m.q, m.scale) for m in weights]
        if w.tensor_core_rows > 0:
            chosen = quant_kernels.choose(pairs, decoder.dtype)
            tiles[name] = {rows: list(config) for rows, config in chosen._asdict().items()}
        if w.q.dtype == torch.int8:
            tiles[f"{name} int8"] = [c and list(c) for c in choose_int8_gemm(pairs, decoder.dtype)]
        for rows in {1, w.tensor_core_rows + 1}:
            linear(torch.zeros(rows, w.q.shape[1], dtype=decoder.dtype, device=decoder.device), w)
    torch.cuda.synchronize(decoder.device)
    return tiles


def _fresh_state(decoder: FastDecoder, rows: int) -> DecodeState:
    return decoder.new_state(rows, cache_len(GUARD_PROMPT_LEN + GUARD_STEPS + 1), 1 + GUARD_STEPS)


def _prefill(decoder: FastDecoder, state: DecodeState, prompts: Tensor) -> None:
    """The guard prompts into their slots, step counter at column 1, each slot armed to decode."""
    state.step.fill_(1)
    chunks = [Chunk(row, 0, p, emit=len(p) - 1) for row, p in enumerate(prompts.tolist())]
    decoder.prefill(pack(chunks, decoder.device), state)
