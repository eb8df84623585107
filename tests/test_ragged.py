"""Packed prefill chunks: index tensors checked by hand, and attention equal to plain causal attention."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from runners.engines import ragged
from runners.engines.ragged import Chunk

CPU = torch.device("cpu")


def test_pack_lays_out_tokens_keys_and_emitted_rows() -> None:
    # a continuation of slot 2 (2 tokens at positions 3, 4; its last one gives the first token) and
    # the first chunk of slot 0 (3 tokens, prompt not finished)
    batch = ragged.pack([Chunk(2, 3, [11, 12], emit=1), Chunk(0, 0, [21, 22, 23])], CPU, pad_id=0)
    assert batch.tokens == 5 and batch.ids.tolist() == [11, 12, 21, 22, 23, 0, 0, 0]  # padded to 8
    assert batch.pos.tolist() == [3, 4, 0, 1, 2, 0, 0, 0]
    assert batch.slot.tolist() == [2, 2, 0, 0, 0]
    assert batch.key_slot.tolist() == [2] * 5 + [0] * 3  # slot 2 attends to positions 0..4
    assert batch.key_pos.tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert batch.emit.tolist() == [1] and batch.emit_slot.tolist() == [2]
    assert batch.chunk_slot.tolist() == [2, 0] and batch.chunk_end.tolist() == [5, 3]
    assert batch.cu_q.tolist() == [0, 2, 5] and batch.cu_k.tolist() == [0, 5, 8]
    assert batch.cu_q.dtype == torch.int32 and (batch.max_q, batch.max_k) == (3, 5)
    assert batch.spans == [(0, 2, 0, 5), (2, 5, 5, 8)]


def test_static_row_emits_at_its_own_last_prompt_token_not_the_padding() -> None:
    batch = ragged.pack([Chunk(0, 0, [5, 6, 0, 0], emit=1), Chunk(1, 0, [7, 8, 9, 10], emit=3)], CPU)
    assert batch.emit.tolist() == [1, 7]
    assert batch.chunk_end.tolist() == [2, 4]  # the row decodes from position 2, over its padding


def test_attention_equals_causal_attention_over_whole_sequences_and_continuations() -> None:
    torch.manual_seed(0)
    heads, kv_heads, dim, length = 4, 2, 8, 11
    k_full = torch.randn(length, kv_heads, dim)
    v_full = torch.randn(length, kv_heads, dim)
    q_full = torch.randn(length, heads, dim)
    expand = lambda t: t.transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
    want = F.scaled_dot_product_attention(q_full.transpose(0, 1), expand(k_full), expand(v_full),
                                          is_causal=True).transpose(0, 1)
    # chunk A: the whole sequence; chunk B: its last 4 tokens as a continuation over all 11 keys
    batch = ragged.pack([Chunk(0, 0, [1] * length), Chunk(1, length - 4, [1] * 4)], CPU)
    q = torch.cat([q_full, q_full[-4:]])
    k, v = torch.cat([k_full, k_full]), torch.cat([v_full, v_full])
    got = ragged.attention(q, k, v, batch)
    assert torch.allclose(got[:length], want, atol=1e-5)
    assert torch.allclose(got[length:], want[-4:], atol=1e-5)


def test_lone_prompt_buckets_are_four_per_octave_and_end_at_the_first_that_holds_the_limit() -> None:
    from runners.engines.lone_prefill import buckets

    assert buckets(1) == [64] and buckets(64) == [64]
    assert buckets(65) == [64, 80]
    assert buckets(600) == [64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640]
    sizes = buckets(8192)
    assert sizes[-1] == 8192 and all(b / a <= 1.25 for a, b in zip(sizes, sizes[1:]))
