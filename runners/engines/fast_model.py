"""A plain-PyTorch Llama-family decoder (Llama, Mistral, Qwen2) running on a loaded HF model's weights.

Why not the HF forward: its decode step launches many small kernels, repeats KV heads for GQA and
builds masks per layer. Here QKV and gate/up are fused into one matmul each, attention reads every
KV head once, and a decode step is a function of static buffers only, so one CUDA graph replays it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from runners.quant import QuantWeight, linear


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
class DecodeState:
    """Static buffers of one batch shape; a captured decode step reads and advances only these.

    The KV cache is slot-major with a write position per row (`cache_pos`), so a scheduler can put
    any request in any slot. Within a slot it is [kv_heads, max_len, head_dim]: the layout SDPA and
    batched matmuls read without a copy.
    """

    k: list[Tensor]  # per layer [slots, kv_heads, max_len, head_dim]
    v: list[Tensor]
    tokens: Tensor  # [slots] the token each row feeds into the next step
    rope_pos: Tensor  # [slots] its position within the row's own sequence
    cache_pos: Tensor  # [slots] where its K/V is written in the cache
    start: Tensor  # [slots] first valid cache position (left padding before it)
    rows: Tensor  # arange(slots)
    key_idx: Tensor  # arange(max_len)
    out: Tensor  # [slots, max_output_len] generated ids
    step: Tensor  # [1] column of `out` the next step writes
    active: Tensor  # [slots] 1 where a row advances its positions; 0 parks a free slot (continuous)

    @property
    def kv_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


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

    def __init__(self, hf_model: torch.nn.Module, config, attn: str = "bmm") -> None:
        if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
            raise ValueError(f"fast engine supports SiLU MLPs without bias, not {config.hidden_act!r}")
        if attn not in ("sdpa", "bmm"):
            raise ValueError(f"attn must be 'sdpa' or 'bmm', not {attn!r}")
        inner = hf_model.model
        self.attn = attn
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
        self.lm_head = hf_model.lm_head.weight.detach()
        self.dtype = self.embed.dtype
        self.device = self.embed.device
        self.layers = [self._layer_weights(layer) for layer in inner.layers]
        self.layer_fn = self.decode_layer
        self.head_fn = self.decode_head
        self.norm_fn, self.rotate_fn, self.silu_mul_fn = _rms_norm, _rotate, _silu_mul

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
        """Compile one layer and the head once, for any batch and cache length.

        Every layer has the same shapes, so one compiled layer serves all of them: compile time is
        one layer's, not the model's, and dynamic sizes keep it from recompiling per batch shape.
        Prefill compiles only its elementwise parts (norm, rope, SiLU·up): its matmuls are large
        already, but eager runs each of those as several full passes over [tokens, hidden].
        """
        fn = lambda f: torch.compile(f, dynamic=True, fullgraph=True)
        self.layer_fn, self.head_fn = fn(self.decode_layer), fn(self.decode_head)
        self.norm_fn, self.rotate_fn, self.silu_mul_fn = fn(_rms_norm), fn(_rotate), fn(_silu_mul)

    def new_state(self, slots: int, max_len: int, max_output_len: int) -> DecodeState:
        """Zeroed buffers (never NaN: masked cache entries are still multiplied by zero weights)."""
        kv = lambda: torch.zeros(slots, self.kv_heads, max_len, self.head_dim, dtype=self.dtype,
                                 device=self.device)
        longs = lambda n: torch.zeros(n, dtype=torch.long, device=self.device)
        return DecodeState(
            k=[kv() for _ in self.layers], v=[kv() for _ in self.layers], tokens=longs(slots),
            rope_pos=longs(slots), cache_pos=longs(slots), start=longs(slots),
            rows=torch.arange(slots, device=self.device),
            key_idx=torch.arange(max_len, device=self.device),
            out=torch.zeros(slots, max_output_len, dtype=torch.long, device=self.device),
            step=longs(1), active=torch.ones(slots, dtype=torch.long, device=self.device),
        )

    def rope(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        freqs = pos[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.rope_scale).to(self.dtype), (emb.sin() * self.rope_scale).to(self.dtype)

    @torch.no_grad()
    def prefill(self, ids: Tensor, start: Tensor, same_length: bool, st: DecodeState) -> Tensor:
        """Run left-padded prompts [B, P] into cache slots 0..B-1, positions 0..P-1; last logits [B, V].

        Equal lengths take the causal flash kernel with native GQA. Mixed lengths need a padding
        mask, which only the memory-efficient kernel takes, and it needs equal head counts, so KV
        heads are repeated there (prefill is compute-bound; decode never repeats them).
        """
        B, P = ids.shape
        group = self.heads // self.kv_heads
        pos = (torch.arange(P, device=ids.device)[None, :] - start[:, None]).clamp(min=0)
        cos, sin = (t[:, None] for t in self.rope(pos))  # [B, 1, P, D]
        mask = None
        if not same_length:
            q_idx = torch.arange(P, device=ids.device)
            causal = q_idx[None, :] <= q_idx[:, None]
            # a padding query sees itself, so no softmax row is empty (that would be NaN in the cache)
            mask = (causal & (q_idx[None, None, :] >= start[:, None, None])) | torch.eye(
                P, dtype=torch.bool, device=ids.device)
            mask = mask[:, None]
        h = self.embed[ids]
        for w, kc, vc in zip(self.layers, st.k, st.v):
            x = self.norm_fn(h, w.attn_norm, self.eps)
            qkv = linear(x, w.wqkv, w.bqkv).view(B, P, -1, self.head_dim).transpose(1, 2)
            q, k, v = qkv.split([self.heads, self.kv_heads, self.kv_heads], dim=1)
            q, k = self.rotate_fn(q, cos, sin), self.rotate_fn(k, cos, sin)
            kc[:B, :, :P] = k
            vc[:B, :, :P] = v
            if mask is None:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=group > 1)
            else:
                k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            h = h + self.reduce(linear(o.transpose(1, 2).reshape(B, P, -1), w.wo, w.bo))
            x = self.norm_fn(h, w.mlp_norm, self.eps)
            h = h + self.reduce(linear(self.silu_mul_fn(linear(x, w.w13)), w.w2))
        return F.linear(_rms_norm(h[:, -1], self.norm, self.eps), self.lm_head)

    @torch.no_grad()
    def prefill_slot(self, ids: Tensor, slot: int, pos0: int, st: DecodeState) -> Tensor:
        """Run one request's prompt chunk ids [n] into cache slot `slot` at positions pos0..pos0+n-1,
        attending to its own earlier chunks; returns the chunk's last logits [V].

        Continuous batching prefills one request at a time into any free slot, in chunks when the
        prompt is over the step's token budget; the first chunk takes the causal flash kernel.
        """
        n, end = ids.shape[0], pos0 + ids.shape[0]
        group = self.heads // self.kv_heads
        pos = torch.arange(pos0, end, device=ids.device)
        cos, sin = (t[None, None] for t in self.rope(pos))  # [1, 1, n, D]
        mask = None if pos0 == 0 else (st.key_idx[None, :end] <= pos[:, None])
        h = self.embed[ids][None]
        for w, kc, vc in zip(self.layers, st.k, st.v):
            x = self.norm_fn(h, w.attn_norm, self.eps)
            qkv = linear(x, w.wqkv, w.bqkv).view(1, n, -1, self.head_dim).transpose(1, 2)
            q, k, v = qkv.split([self.heads, self.kv_heads, self.kv_heads], dim=1)
            q, k = self.rotate_fn(q, cos, sin), self.rotate_fn(k, cos, sin)
            kc[slot, :, pos0:end] = k[0]
            vc[slot, :, pos0:end] = v[0]
            if mask is None:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=group > 1)
            else:
                keys = kc[slot:slot + 1, :, :end].repeat_interleave(group, 1)
                values = vc[slot:slot + 1, :, :end].repeat_interleave(group, 1)
                o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            h = h + self.reduce(linear(o.transpose(1, 2).reshape(1, n, -1), w.wo, w.bo))
            x = self.norm_fn(h, w.mlp_norm, self.eps)
            h = h + self.reduce(linear(self.silu_mul_fn(linear(x, w.w13)), w.w2))
        return F.linear(_rms_norm(h[0, -1], self.norm, self.eps), self.lm_head)

    def decode_layer(self, h: Tensor, attn_norm: Tensor, wqkv: Tensor | QuantWeight, bqkv: Tensor | None,
                     wo: Tensor | QuantWeight, bo: Tensor | None, mlp_norm: Tensor,
                     w13: Tensor | QuantWeight, w2: Tensor | QuantWeight,
                     kc: Tensor, vc: Tensor, cos: Tensor, sin: Tensor, rows: Tensor,
                     cache_pos: Tensor, mask: Tensor) -> Tensor:
        """One layer for one new token per row; the query group of a KV head is its query length.

        Weights come as plain tensor arguments so one compiled graph serves every layer.
        """
        h = h + self.decode_attn(h, attn_norm, wqkv, bqkv, wo, bo, kc, vc, cos, sin, rows, cache_pos, mask)
        return h + self.decode_mlp(h, mlp_norm, w13, w2)

    def decode_attn(self, h: Tensor, attn_norm: Tensor, wqkv: Tensor | QuantWeight, bqkv: Tensor | None,
                    wo: Tensor | QuantWeight, bo: Tensor | None, kc: Tensor, vc: Tensor, cos: Tensor,
                    sin: Tensor, rows: Tensor, cache_pos: Tensor, mask: Tensor) -> Tensor:
        """The attention half of a decode layer up to o_proj, without the residual (a tensor-parallel
        rank sums it over ranks before adding it)."""
        B = h.shape[0]
        x = _rms_norm(h, attn_norm, self.eps)
        qkv = linear(x, wqkv, bqkv).view(B, -1, self.head_dim)
        q, k, v = qkv.split([self.heads, self.kv_heads, self.kv_heads], dim=1)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        kc[rows, :, cache_pos] = k
        vc[rows, :, cache_pos] = v
        q = q.view(B, self.kv_heads, self.heads // self.kv_heads, self.head_dim)
        if self.attn == "sdpa":
            o = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask)
        else:
            scores = torch.matmul(q, kc.transpose(-1, -2)) * self.head_dim**-0.5 + mask
            o = torch.matmul(torch.softmax(scores.float(), dim=-1).to(q.dtype), vc)
        return linear(o.reshape(B, -1), wo, bo)

    def decode_mlp(self, h: Tensor, mlp_norm: Tensor, w13: Tensor | QuantWeight, w2: Tensor | QuantWeight) -> Tensor:
        """The MLP half of a decode layer, without the residual."""
        return linear(_silu_mul(linear(_rms_norm(h, mlp_norm, self.eps), w13)), w2)

    def reduce(self, x: Tensor) -> Tensor:
        """Sum a row-parallel output over tensor-parallel ranks; one process holds it all already."""
        return x

    def decode_head(self, h: Tensor, st_out: Tensor, step: Tensor) -> Tensor:
        """Logits and greedy token of the last layer's output, written to column `step` of `out`."""
        logits = F.linear(_rms_norm(h, self.norm, self.eps), self.lm_head)
        nxt = logits.argmax(dim=-1)
        st_out.index_copy_(1, step, nxt[:, None])
        return nxt

    @torch.no_grad()
    def decode_step(self, st: DecodeState) -> None:
        """Feed `st.tokens`, write the next ones, advance every counter: all on the device."""
        h = self.embed[st.tokens]
        cos, sin = (t[:, None] for t in self.rope(st.rope_pos))
        valid = (st.key_idx[None, :] >= st.start[:, None]) & (st.key_idx[None, :] <= st.cache_pos[:, None])
        mask = torch.zeros(valid.shape, dtype=self.dtype, device=valid.device)
        mask = mask.masked_fill(~valid, float("-inf"))[:, None, None, :]
        for w, kc, vc in zip(self.layers, st.k, st.v):
            h = self.layer_fn(h, w.attn_norm, w.wqkv, w.bqkv, w.wo, w.bo, w.mlp_norm, w.w13, w.w2,
                              kc, vc, cos, sin, st.rows, st.cache_pos, mask)
        st.tokens.copy_(self.head_fn(h, st.out, st.step))
        st.rope_pos.add_(st.active)
        st.cache_pos.add_(st.active)
        st.step.add_(1)
