"""The continuous engine's KV cache: a pool of fixed-size blocks and a block table per request slot.

A slot cache gives every slot the workload's longest request up front, so its size is slots × longest.
Paged, a request holds only the blocks its tokens fill and the pool is sized from the GPU's free memory.
Decode attention reads each row's own blocks up to its length either way
(runners.engines.kernels.paged_attention). The static engine keeps its slot cache (`DecodeState`, a pool
whose block table gives slot b the contiguous rows b × max_len onwards): it models static batching,
padding included.

The state has the same per-row buffers as the slot cache's `DecodeState` (tokens, pos, out, step,
active), so the prefill and the step counters are shared code; K/V positions go through `index`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from runners.engines.kernels.paged_attention import flat_index


@dataclass
class BlockPool:
    """Per-layer K/V pools addressed through a block table: what every decode state shares, whether its
    table hands each slot contiguous rows (the static engine's `DecodeState`) or blocks from a pool."""

    k: list[Tensor]  # per layer [blocks × block_size, kv_heads, head_dim]
    v: list[Tensor]
    table: Tensor  # [rows, max_blocks] int32: pool block of each block-sized run of a row's positions
    block_size: int

    @property
    def kv_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    @property
    def max_len(self) -> int:
        return self.table.shape[1] * self.block_size

    def index(self, slot: Tensor, pos: Tensor) -> Tensor:
        """Pool rows of the given (slot, position) pairs: one flat index, for writes and gathers alike."""
        return flat_index(self.table, slot, pos, self.block_size)


@dataclass
class PagedState(BlockPool):
    """Static buffers over one block pool; a captured decode step reads and advances only these.

    Per-slot buffers have one row more than the scheduler's slots: the parking row, never active, whose
    table points only at the parking block. A decode step runs over `sel`, the slots it decodes padded
    to its width with the parking row, so its width follows the number of decoding rows, not the highest
    slot they hold (a request's K/V live in its blocks, not in its slot's position)."""

    tokens: Tensor  # [slots + 1] the token each row feeds into the next step
    pos: Tensor  # [slots + 1] that token's position
    out: Tensor  # [slots + 1, 1] the latest generated id
    step: Tensor  # [1] column of `out` the next step writes
    active: Tensor  # [slots + 1] 1 where a row decodes; 0 parks it (its K/V write lands where nothing reads)
    history: Tensor  # [slots + 1, max_len] the id fed at each position: what a preempted request recomputes
    sel: Tensor  # [width] the slots a decode step of this width runs, the parking row as padding
    sel_out: Tensor  # [width, 1] the step's ids before they go back to their slots

    @property
    def blocks(self) -> int:
        return self.k[0].shape[0] // self.block_size

    @property
    def parking(self) -> int:
        """The parking row's index, one past the last slot."""
        return self.tokens.numel() - 1

    def selection(self, width: int) -> PagedState:
        """The same buffers with a `sel` of `width` rows (all parked until the engine fills it)."""
        sel = torch.full((width,), self.parking, dtype=torch.long, device=self.tokens.device)
        return replace(self, sel=sel, sel_out=torch.zeros(width, 1, dtype=torch.long, device=sel.device))


def new_paged_state(kv_heads: int, head_dim: int, layers: int, dtype: torch.dtype, device: torch.device,
                    slots: int, max_len: int, blocks: int, block_size: int) -> PagedState:
    """Zeroed buffers (never NaN: a parked row's attention reads nothing, but its writes must stay finite)."""
    kv = lambda: torch.zeros(blocks * block_size, kv_heads, head_dim, dtype=dtype, device=device)
    ints = lambda *shape: torch.zeros(*shape, dtype=torch.long, device=device)
    columns = -(-max_len // block_size)
    rows = slots + 1  # the last is the parking row
    return PagedState(
        k=[kv() for _ in range(layers)], v=[kv() for _ in range(layers)],
        table=torch.zeros(rows, columns, dtype=torch.int32, device=device), block_size=block_size,
        tokens=ints(rows), pos=ints(rows), out=ints(rows, 1), step=ints(1), active=ints(rows),
        history=ints(rows, columns * block_size), sel=torch.full((slots,), slots, dtype=torch.long, device=device),
        sel_out=ints(slots, 1),
    )
