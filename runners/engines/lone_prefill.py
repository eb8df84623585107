"""CUDA graphs of one prompt's prefill from position 0 into any cache slot, one per length bucket.

A packed prefill issues about twenty host operations per layer. For a lone prompt of a few hundred
tokens the GPU finishes each one before the host has issued the next: on an H200 the 1B preset's
512-token prefill was 17 ms issued for 3 ms of kernels. A lone prompt is exactly the light-load case
(one request admitted in a step) and a static batch of one, so their TTFT would measure the host.
A graph per length bucket replays the whole forward in one launch. The continuous engine uses it over
its block pool for a step whose only prefill is one whole prompt (an earlier slot-cache version that
mixed its replays with eager packed prefills hit a device-side index assert on an H200; the paged one
indexes every position through the block table, clamped inside it).

Buckets are four per octave from 64 (64, 80, 96, 112, 128, 160, …), so a prompt is padded by less
than a quarter. The padding comes after the prompt's last token: causal attention never lets a real
token see it, and its cache writes land at positions (clamped into the cache) that a later decode
step overwrites before it reads them.
"""
from __future__ import annotations

import torch

from runners.engines.fast_model import DecodeState, FastDecoder
from runners.engines.paged_cache import PagedState
from runners.engines.ragged import PackedPrefill

SMALLEST = 64


def buckets(limit: int) -> list[int]:
    """Bucket sizes up to the first one that holds `limit` tokens."""
    sizes, octave = [], SMALLEST
    while not sizes or sizes[-1] < limit:
        sizes += [octave * m // 4 for m in range(4, 8)]
        octave *= 2
    return sizes[:next(k for k, size in enumerate(sizes) if size >= limit) + 1]


class LonePrefill:
    """Captured prefills of one prompt of up to `limit` tokens over `state`'s cache. Capturing runs
    each bucket on slot 0: the caller resets the slots' positions and flags afterwards."""

    def __init__(self, decoder: FastDecoder, state: DecodeState | PagedState, limit: int) -> None:
        self.sizes = buckets(limit)
        top, device = self.sizes[-1], decoder.device
        self.host = torch.zeros(top + 2, dtype=torch.long).pin_memory()  # ids…, slot, real length
        self.inputs = torch.zeros(top + 2, dtype=torch.long, device=device)
        # a graph reads its inputs where they were at capture: every one of them lives as long as it
        self.positions = torch.arange(top, device=device).clamp(max=state.max_len - 1)
        self.bounds = {size: torch.tensor([0, size], dtype=torch.int32, device=device) for size in self.sizes}
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}
        pool = torch.cuda.graph_pool_handle()
        for size in reversed(self.sizes):  # the largest first, so the smaller ones reuse its pool
            forward = lambda: decoder.prefill(self._batch(size), state)
            _warm(forward, device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.logits[size] = forward()
            self.graphs[size] = graph

    def _batch(self, size: int) -> PackedPrefill:
        """The packed form of one chunk of `size` tokens, every index a view of a kept buffer."""
        top = self.sizes[-1]
        slot, length = self.inputs[top:top + 1], self.inputs[top + 1:top + 2]
        many, pos, bounds = slot.expand(size), self.positions[:size], self.bounds[size]
        return PackedPrefill(ids=self.inputs[:size], pos=pos, slot=many, key_slot=many, key_pos=pos,
                             emit=length - 1, emit_slot=slot, chunk_slot=slot, chunk_end=length.clone(),
                             cu_q=bounds, cu_k=bounds, tokens=size, max_q=size, max_k=size,
                             spans=[(0, size, 0, size)])

    def run(self, slot: int, prompt: list[int]) -> torch.Tensor:
        """Prefill `prompt` into `slot` (arming it for decoding, as FastDecoder.prefill does); returns
        its last logits [1, vocab], valid until the next run."""
        n, top = len(prompt), self.sizes[-1]
        self.host[:n] = torch.tensor(prompt, dtype=torch.long)
        self.host[top], self.host[top + 1] = slot, n
        self.inputs.copy_(self.host, non_blocking=True)
        size = next(s for s in self.sizes if s >= n)
        self.graphs[size].replay()
        return self.logits[size]


def _warm(forward, device: torch.device) -> None:
    """One eager run on a side stream before capture, as CUDA graph capture requires."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        forward()
    torch.cuda.current_stream(device).wait_stream(stream)
