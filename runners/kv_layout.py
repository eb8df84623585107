"""How long the fast engines' KV cache rows are: one rule shared by the engines (which allocate them)
and the app (which predicts their memory before a sweep runs). No torch here."""
from __future__ import annotations

LEN_ALIGN = 64  # cache length multiple: keeps the attention mask rows aligned for the fused kernels


def cache_len(tokens: int) -> int:
    """The allocated length of a row that must hold `tokens` tokens: rounded up to LEN_ALIGN."""
    return -(-tokens // LEN_ALIGN) * LEN_ALIGN
