"""How long the fast engines' KV cache rows are: one rule shared by the engines (which allocate them)
and the app (which predicts their memory before a sweep runs). No torch here."""
from __future__ import annotations

LEN_ALIGN = 64  # cache length multiple: keeps the attention mask rows aligned for the fused kernels
KV_BLOCK_SIZE = 32  # tokens per block of the continuous engine's paged pool (bench/paged_attention.py: on an
# H200, 32-token blocks read as fast as 64-token ones and 11 % faster than 16; docs/benchmarks.md)


def cache_len(tokens: int) -> int:
    """The allocated length of a row that must hold `tokens` tokens: rounded up to LEN_ALIGN."""
    return -(-tokens // LEN_ALIGN) * LEN_ALIGN
