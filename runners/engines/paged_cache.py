"""The continuous engine's KV cache: a pool of fixed-size blocks and a block table per request slot.

A slot cache gives every slot the workload's longest request, so its size is slots × longest and a
decode step reads every slot to that length. Paged, a request holds only the blocks its tokens fill,
the pool is sized from the GPU's free memory, and decode attention reads each row's own blocks
(runners.paged_attention). The static engine keeps its slot cache: it models static batching, padding
included.

The state has the same per-row buffers as the slot cache's `DecodeState` (tokens, pos, out, step,
active), so the prefill and the step counters are shared code; K/V positions go through `index`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from runners.paged_attention import flat_index


@dataclass
class PagedState:
    """Static buffers over one block pool; a captured decode step reads and advances only these."""

    k: list[Tensor]  # per layer [blocks × block_size, kv_heads, head_dim]
    v: list[Tensor]
    table: Tensor  # [slots, max_blocks] int32: pool block of each block-sized run of a slot's positions
    block_size: int
    tokens: Tensor  # [slots] the token each row feeds into the next step
    pos: Tensor  # [slots] that token's position
    rows: Tensor  # arange(slots)
    out: Tensor  # [slots, 1] the latest generated id
    step: Tensor  # [1] column of `out` the next step writes
    active: Tensor  # [slots] 1 where a row decodes; 0 parks it (its K/V write lands where nothing reads)
    history: Tensor  # [slots, max_len] the id fed at each position: what a preempted request recomputes

    @property
    def kv_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    @property
    def max_len(self) -> int:
        return self.table.shape[1] * self.block_size

    @property
    def blocks(self) -> int:
        return self.k[0].shape[0] // self.block_size

    def index(self, slot: Tensor, pos: Tensor) -> Tensor:
        """Pool rows of the given (slot, position) pairs: one flat index, for writes and gathers alike."""
        return flat_index(self.table, slot, pos, self.block_size)

    def prefix(self, rows: int) -> PagedState:
        """Views of the first `rows` slots over the same pool: a step over them writes the shared buffers."""
        return PagedState(k=self.k, v=self.v, table=self.table[:rows], block_size=self.block_size,
                          tokens=self.tokens[:rows], pos=self.pos[:rows], rows=self.rows[:rows], out=self.out[:rows],
                          step=self.step, active=self.active[:rows], history=self.history[:rows])


def new_paged_state(kv_heads: int, head_dim: int, layers: int, dtype: torch.dtype, device: torch.device,
                    slots: int, max_len: int, blocks: int, block_size: int) -> PagedState:
    """Zeroed buffers (never NaN: a parked row's attention reads nothing, but its writes must stay finite)."""
    kv = lambda: torch.zeros(blocks * block_size, kv_heads, head_dim, dtype=dtype, device=device)
    ints = lambda *shape: torch.zeros(*shape, dtype=torch.long, device=device)
    columns = -(-max_len // block_size)
    return PagedState(
        k=[kv() for _ in range(layers)], v=[kv() for _ in range(layers)],
        table=torch.zeros(slots, columns, dtype=torch.int32, device=device),
        block_size=block_size, tokens=ints(slots), pos=ints(slots), rows=torch.arange(slots, device=device),
        out=ints(slots, 1), step=ints(1), active=ints(slots), history=ints(slots, columns * block_size),
    )
