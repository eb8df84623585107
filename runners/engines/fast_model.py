"""A plain-PyTorch Llama-family decoder (Llama, Mistral, Qwen2) running on a loaded HF model's weights.

Why not the HF forward: its decode step launches many small kernels, repeats KV heads for GQA and
builds masks per layer. Here QKV and gate/up are fused into one matmul each, attention reads every
KV head once, and a decode step is a function of static buffers only, so one CUDA graph replays it.

Prefill and decode share a layer's pieces (norm + QKV + rope, the MLP) and differ only in attention:
ragged causal attention over packed prompt chunks (runners.engines.ragged) for prefill; for decode,
each row's query group against the first `lens` cached tokens of its own row, through a block table
(runners.engines.kernels.paged_attention). The static batch's slot cache and the continuous engine's
block pool are both read that way, so one compiled layer serves both and every length a batch
reaches replays in the graph captured for its width: a step reads what its rows hold, not the cache
set up for the point's longest draw.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from runners.engines import ragged
from runners.engines.kernels.paged_attention import paged_decode_attention
from runners.engines.kernels.quant import QuantWeight, linear
from runners.engines.kv_layout import KV_BLOCK_SIZE
from runners.engines.paged_cache import BlockPool, PagedState, new_paged_state
from runners.engines.ragged import PackedPrefill


@dataclass
class LayerWeights:
    attn_norm: Tensor
    wqkv: Tensor | QuantWeight  # [(heads + 2 * kv_heads) * head_dim, hidden]
    bqkv: Tensor | None  # Qwen2 (and attention_bias) only
    wo: Tensor | QuantWeight
    bo: Tensor | None
    mlp_norm: Tensor
    w13: Tensor | QuantWeight  # gate and up stacked: [2 * intermediate, hidden]
    w2: Tensor | QuantWeight


@dataclass
class DecodeState(BlockPool):
    """Static buffers of one batch shape; a captured decode step reads and advances only these.

    The KV cache is slot-major: slot b holds positions 0 … max_len - 1 in rows b × max_len onwards of a
    `[slots × max_len, kv_heads, head_dim]` pool, and `table` names those rows in blocks, as the paged pool's
    block table does, so decode attention reads each row up to its own position and no further. Every
    sequence starts at position 0 of its slot, so a scheduler can put any request in any slot.
    """

    tokens: Tensor  # [slots] the token each row feeds into the next step
    pos: Tensor  # [slots] that token's position: its rotary position and where its K/V is written
    rows: Tensor  # arange(slots)
    out: Tensor  # [slots, max_output_len] generated ids
    step: Tensor  # [1] column of `out` the next step writes
    active: Tensor  # [slots] 1 where a row advances its position (every row of a static batch, once prefilled)


def _fuse_rows(params: list[torch.nn.Parameter]) -> Tensor:
    """Stack parameters row-wise and re-point them at views of the result, so no copy is duplicated."""
    fused = torch.cat([p.detach() for p in params])
    offset = 0
    for p in params:
        p.data = fused[offset:offset + p.shape[0]]
        offset += p.shape[0]
    return fused


def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm computed in float32 and cast back before the weight, exactly as the HF models do."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _silu_mul(gate_up: Tensor) -> Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def sliding_window(config) -> int | None:
    """The attention window the checkpoint uses, or None when every layer attends to everything."""
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None) or []
    if window and ("sliding_attention" in layer_types
                   or (config.model_type == "mistral" and not layer_types)):
        return int(window)
    return None


class FastDecoder:
    """Prefill and decode for Llama-family models; the weights stay shared with the HF model."""

    def __init__(self, hf_model: torch.nn.Module, config) -> None:
        if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
            raise ValueError(f"fast engine supports SiLU MLPs without bias, not {config.hidden_act!r}")
        inner = hf_model.model
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.window = sliding_window(config)
        rotary = inner.rotary_emb  # its inv_freq and scaling already encode llama3/yarn/linear rope
        self.inv_freq = rotary.inv_freq.detach().float()
        self.rope_scale = float(rotary.attention_scaling)
        self.embed = inner.embed_tokens.weight.detach()
        self.norm = inner.norm.weight.detach()
        self.lm_head: Tensor | QuantWeight = hf_model.lm_head.weight.detach()  # quantised on request (fast_quant)
        self.dtype = self.embed.dtype
        self.device = self.embed.device
        self.layers = [self._layer_weights(layer) for layer in inner.layers]
        self.layer_fn, self.head_fn = self.decode_layer, self.decode_head
        self.qkv_fn, self.mlp_fn = self.qkv_rope, self.mlp
        self.compiled = False

    @staticmethod
    @torch.no_grad()
    def _layer_weights(layer: torch.nn.Module) -> LayerWeights:
        a, m = layer.self_attn, layer.mlp
        biases = [a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]
        return LayerWeights(
            attn_norm=layer.input_layernorm.weight.detach(),
            wqkv=_fuse_rows([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
            bqkv=_fuse_rows(biases) if all(b is not None for b in biases) else None,
            wo=a.o_proj.weight.detach(),
            bo=None if a.o_proj.bias is None else a.o_proj.bias.detach(),
            mlp_norm=layer.post_attention_layernorm.weight.detach(),
            w13=_fuse_rows([m.gate_proj.weight, m.up_proj.weight]),
            w2=m.down_proj.weight.detach(),
        )

    def enable_compile(self) -> None:
        """Compile the decode layer, the head and the prefill's pieces once, for any batch, cache
        length or packed token count.

        Every layer has the same shapes, so one compiled layer serves all of them: compile time is
        one layer's, not the model's, and dynamic sizes keep it from recompiling per batch shape.
        Prefill compiles the pieces around its ragged attention (norm + QKV + rope; norm + MLP):
        eager would run each elementwise op as several full passes over [tokens, hidden].
        """
        fn = lambda f: torch.compile(f, dynamic=True, fullgraph=True)
        self.layer_fn, self.head_fn = fn(self.decode_layer), fn(self.decode_head)
        self.qkv_fn, self.mlp_fn = fn(self.qkv_rope), fn(self.mlp)
        self.compiled = True

    def new_state(self, slots: int, max_len: int, max_output_len: int) -> DecodeState:
        """Zeroed buffers (never NaN: a row's writes past what it reads must stay finite)."""
        columns = -(-max_len // KV_BLOCK_SIZE)
        kv = lambda: torch.zeros(slots * columns * KV_BLOCK_SIZE, self.kv_heads, self.head_dim, dtype=self.dtype,
                                 device=self.device)
        ints = lambda *shape: torch.zeros(*shape, dtype=torch.long, device=self.device)
        table = torch.arange(slots * columns, dtype=torch.int32, device=self.device).view(slots, columns)
        return DecodeState(
            k=[kv() for _ in self.layers], v=[kv() for _ in self.layers], table=table, block_size=KV_BLOCK_SIZE,
            tokens=ints(slots), pos=ints(slots), rows=torch.arange(slots, device=self.device),
            out=ints(slots, max_output_len), step=ints(1),
            active=torch.ones(slots, dtype=torch.long, device=self.device),
        )

    def new_paged_state(self, slots: int, max_len: int, blocks: int, block_size: int) -> PagedState:
        """A block pool of `blocks` blocks and tables for `slots` requests of up to `max_len` tokens."""
        return new_paged_state(self.kv_heads, self.head_dim, len(self.layers), self.dtype, self.device, slots,
                               max_len, blocks, block_size)

    def kv_bytes_per_token(self) -> int:
        return 2 * len(self.layers) * self.kv_heads * self.head_dim * self.embed.element_size()

    def rope(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin [T, 1, D] of positions [T], broadcast over heads."""
        freqs = pos[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]
        return (emb.cos() * self.rope_scale).to(self.dtype), (emb.sin() * self.rope_scale).to(self.dtype)

    def qkv_rope(self, h: Tensor, attn_norm: Tensor, wqkv: Tensor | QuantWeight, bqkv: Tensor | None,
                 cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Norm, fused QKV and rotary embedding of token rows h [T, hidden] (decode rows or packed
        prompt tokens): q [T, heads, D], k and v [T, kv_heads, D]."""
        qkv = linear(_rms_norm(h, attn_norm, self.eps), wqkv, bqkv).view(h.shape[0], -1, self.head_dim)
        q, k, v = qkv.split([self.heads, self.kv_heads, self.kv_heads], dim=1)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def mlp(self, h: Tensor, mlp_norm: Tensor, w13: Tensor | QuantWeight, w2: Tensor | QuantWeight) -> Tensor:
        """The MLP half of a layer, without the residual (a tensor-parallel rank sums it first)."""
        return linear(_silu_mul(linear(_rms_norm(h, mlp_norm, self.eps), w13)), w2)

    def reduce(self, x: Tensor) -> Tensor:
        """Sum a row-parallel output over tensor-parallel ranks; one process holds it all already."""
        return x

    @torch.inference_mode()
    def prefill(self, batch: PackedPrefill, st: DecodeState | PagedState) -> Tensor:
        """Run packed prompt chunks into their cache slots in one forward; logits [emitted, vocab].

        Every matmul runs once over all the chunks' tokens; only attention is per chunk (ragged,
        over the keys gathered from the chunk's slot). Each chunk's slot then continues from its
        end: an emitting chunk's slot gets its first token and is armed for decoding; a partial one
        keeps its position, so a parked decode row's write lands where the next chunk overwrites it.
        """
        n = batch.tokens
        cos, sin = self.rope(batch.pos)
        slot, pos = batch.slot, batch.pos[:n]
        h = self.embed[batch.ids]
        written, read = st.index(slot, pos), st.index(batch.key_slot, batch.key_pos)
        for w, kc, vc in zip(self.layers, st.k, st.v):
            q, k, v = self.qkv_fn(h, w.attn_norm, w.wqkv, w.bqkv, cos, sin)
            kc[written] = k[:n]
            vc[written] = v[:n]
            keys, values = kc[read], vc[read]
            o = F.pad(ragged.attention(q[:n], keys, values, batch).reshape(n, -1), (0, 0, 0, h.shape[0] - n))
            h = h + self.reduce(linear(o, w.wo, w.bo))
            h = h + self.reduce(self.mlp_fn(h, w.mlp_norm, w.w13, w.w2))
        logits = linear(_rms_norm(h[batch.emit], self.norm, self.eps), self.lm_head)
        first = logits.argmax(dim=-1)
        st.pos.index_copy_(0, batch.chunk_slot, batch.chunk_end)
        st.tokens.index_copy_(0, batch.emit_slot, first)
        st.out[:, 0].index_copy_(0, batch.emit_slot, first)
        st.active.index_fill_(0, batch.emit_slot, 1)
        return logits

    def decode_layer(self, h: Tensor, attn_norm: Tensor, wqkv: Tensor | QuantWeight, bqkv: Tensor | None,
                     wo: Tensor | QuantWeight, bo: Tensor | None, mlp_norm: Tensor,
                     w13: Tensor | QuantWeight, w2: Tensor | QuantWeight, kc: Tensor, vc: Tensor,
                     cos: Tensor, sin: Tensor, written: Tensor, table: Tensor, lens: Tensor,
                     block_size: int) -> Tensor:
        """One layer for one new token per row. Weights come as plain tensor arguments so one compiled
        graph serves every layer."""
        h = h + self.decode_attn(h, attn_norm, wqkv, bqkv, wo, bo, kc, vc, cos, sin, written, table, lens, block_size)
        return h + self.mlp(h, mlp_norm, w13, w2)

    def decode_attn(self, h: Tensor, attn_norm: Tensor, wqkv: Tensor | QuantWeight, bqkv: Tensor | None,
                    wo: Tensor | QuantWeight, bo: Tensor | None, kc: Tensor, vc: Tensor, cos: Tensor,
                    sin: Tensor, written: Tensor, table: Tensor, lens: Tensor, block_size: int) -> Tensor:
        """The attention half of a decode layer up to o_proj, without the residual (a tensor-parallel
        rank sums it over ranks before adding it): the new K/V go to each row's cache row `written`,
        and attention reads each row's first lens[b] tokens through its block table."""
        B = h.shape[0]
        q, k, v = self.qkv_rope(h, attn_norm, wqkv, bqkv, cos, sin)
        kc[written] = k
        vc[written] = v
        o = paged_decode_attention(q, kc, vc, table, lens, block_size)
        return linear(o.reshape(B, -1), wo, bo)

    def _paged_decode_step(self, st: PagedState) -> Tensor:
        """decode_step over the selected slots `st.sel`: gather their counters, run the layers over the
        pool, scatter the new ids and positions back (the parking row absorbs the padding's writes)."""
        sel = st.sel
        tokens, pos, active = st.tokens[sel], st.pos[sel], st.active[sel]
        st.history[sel, pos] = tokens
        h = self.embed[tokens]
        cos, sin = self.rope(pos)
        written, table, lens = st.index(sel, pos), st.table[sel], (pos + 1) * active
        for w, kc, vc in zip(self.layers, st.k, st.v):
            h = self.layer_fn(h, w.attn_norm, w.wqkv, w.bqkv, w.wo, w.bo, w.mlp_norm, w.w13, w.w2,
                              kc, vc, cos, sin, written, table, lens, st.block_size)
        st.step.zero_()
        logits, nxt = self.head_fn(h, st.sel_out, st.step)
        st.out[sel] = st.sel_out
        st.tokens[sel] = nxt
        st.pos[sel] = pos + active
        return logits

    def decode_head(self, h: Tensor, st_out: Tensor, step: Tensor) -> tuple[Tensor, Tensor]:
        """Logits and greedy token of the last layer's output, the token written to column `step` of `out`."""
        logits = linear(_rms_norm(h, self.norm, self.eps), self.lm_head)
        nxt = logits.argmax(dim=-1)
        st_out.index_copy_(1, step, nxt[:, None])
        return logits, nxt

    @torch.inference_mode()
    def decode_step(self, st: DecodeState | PagedState) -> Tensor:
        """Feed `st.tokens`, write the next ones, advance every counter: all on the device. Returns the
        step's logits [slots, vocab] (the head computes them anyway; a captured graph keeps them)."""
        if isinstance(st, PagedState):
            return self._paged_decode_step(st)
        h = self.embed[st.tokens]
        cos, sin = self.rope(st.pos)
        written, lens = st.index(st.rows, st.pos), (st.pos + 1) * st.active
        for w, kc, vc in zip(self.layers, st.k, st.v):
            h = self.layer_fn(h, w.attn_norm, w.wqkv, w.bqkv, w.wo, w.bo, w.mlp_norm, w.w13, w.w2,
                              kc, vc, cos, sin, written, st.table, lens, st.block_size)
        logits, nxt = self.head_fn(h, st.out, st.step)
        st.tokens.copy_(nxt)
        st.pos.add_(st.active)
        st.step.add_(1)
        return logits
