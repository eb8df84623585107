"""`fast`: BatchScope's own engine — static KV cache, GQA-aware attention, one CUDA graph per shape.

A decode step reads each row's cache up to its own position through the same block-table kernel as the
continuous engine (runners.engines.fast_model), so the graph captured for a batch width serves every length
the batch reaches, and the step grows as its KV fills, as a static batch's does.

The decode loop is `graph.replay(); event.record()` per step: the graph reads and advances its own
device counters, so the host never waits on the device until the batch is done, and the measured
step time is the GPU's. On CPU the same step runs eagerly, timed by perf_counter.
"""
from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import transformers

from runners import cancel
from runners.engines.base import Batch, Generation
from runners.engines.fast_model import DecodeState, FastDecoder
from runners.engines.fast_quant import decoder_weight_bytes, quantize_with_guard
from runners.engines.kv_layout import cache_len
from runners.engines.lone_prefill import LonePrefill
from runners.engines.models import LoadedModel
from runners.engines.paged_cache import PagedState
from runners.engines.quant_layout import QUANT_DTYPES
from runners.engines.ragged import Chunk, PackedPrefill, pack

VERSION = "4"  # 2: one packed prefill (ragged attention) for static and continuous batches; 3: a static step reads
# each row up to its position, not the whole cache (runners.spec.registry.decode_reads_whole_cache knows which);
# 4: decode attention takes shorter spans for few rows (runners.engines.kernels.paged_kernels.config_for)
PAD_ID = 0


class FastEngine:
    name = "fast"

    def __init__(self, loaded: LoadedModel, compile: bool | None = None, graphs: bool | None = None,
                 decoder: FastDecoder | None = None) -> None:
        """compile/graphs default to on for CUDA, off elsewhere; `decoder` replaces the one built from
        the loaded model (a tensor-parallel rank passes its shard)."""
        self.loaded = loaded
        self.device = loaded.device
        on_cuda = self.device.type == "cuda"
        self.graphs = on_cuda if graphs is None else graphs
        self.decoder = decoder or FastDecoder(loaded.model, loaded.config)
        self.quant = loaded.info.dtype if loaded.info.dtype in QUANT_DTYPES else None
        self._facts: dict[str, Any] = {}
        prepare = self.decoder.enable_compile if (on_cuda if compile is None else compile) else lambda: None
        if self.quant:  # model.json then holds the quantised bytes and the accuracy checks
            self._facts = {**quantize_with_guard(self.decoder, loaded.model, self.quant, loaded.info.quantize_lm_head,
                                                 self._step_runner, prepare),
                           "weight_bytes": decoder_weight_bytes(self.decoder)}
        else:
            prepare()
        self.state: DecodeState | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.lone: LonePrefill | None = None  # batch 1 on a GPU: its prefill as a graph per length
        self.shape: tuple[int, int, int] | None = None
        self.last_setup: dict[str, float] = {}

    def facts(self) -> dict[str, Any]:
        return dict(self._facts)

    def version(self) -> str:
        head = " with lm_head" if self.quant and self.loaded.info.quantize_lm_head else ""
        weights = f", weights {self.quant}{head}" if self.quant else ""
        return (f"fast {VERSION} (packed prefill{weights}, compile {self.decoder.compiled}, "
                f"graphs {self.graphs}; torch {torch.__version__}, transformers {transformers.__version__})")

    def setup(self, batch_size: int, max_prompt_len: int, max_output_len: int) -> float:
        """Allocate the cache and buffers for this shape, warm the step up and capture it."""
        self.release()
        max_len = cache_len(max_prompt_len + max_output_len)
        if self.decoder.window is not None and max_prompt_len + max_output_len > self.decoder.window:
            raise ValueError(f"sequences of {max_prompt_len + max_output_len} tokens exceed the "
                             f"model's sliding window ({self.decoder.window}), which fast does not implement")
        t0 = time.perf_counter()
        self.state = self.decoder.new_state(batch_size, max_len, max_output_len)
        self.shape = (batch_size, max_prompt_len, max_output_len)
        warm_s = 0.0
        if self.decoder.compiled:
            self._warm_prefill(batch_size, max_prompt_len)
        if self.graphs and batch_size == 1:
            self.lone = LonePrefill(self.decoder, self.state, max_prompt_len)
            self.state.pos.zero_()
        if self.decoder.compiled or self.graphs:
            t_warm = time.perf_counter()
            warm_decode(self.decoder, [self.state], self.device)
            warm_s = time.perf_counter() - t_warm
        if self.graphs:
            self.graph, _ = capture(self.decoder, self.state)
        self._sync()
        total = time.perf_counter() - t0
        self.last_setup = {"setup_s": total, "warmup_s": warm_s}
        return total

    def _step_runner(self, state: DecodeState) -> Callable[[], torch.Tensor]:
        """The decode step a measurement of `state` runs (warmed; captured on a GPU), returning logits."""
        if self.decoder.compiled or self.graphs:
            warm_decode(self.decoder, [state], self.device)
        if not self.graphs:
            return lambda: self.decoder.decode_step(state)
        graph, logits = capture(self.decoder, state)
        return lambda: (graph.replay(), logits)[1]

    def _warm_prefill(self, batch_size: int, prompt_len: int) -> None:
        """Run this shape's packed prefill once inside setup, so its compile and any autotuning never
        land in a measured TTFT. The cache it writes is overwritten by the real prefill; the positions
        go back to 0 so the decode warm-up that follows stays inside the cache."""
        self.decoder.prefill(self._pack([[PAD_ID] * prompt_len] * batch_size, prompt_len), self.state)
        self.state.pos.zero_()

    def release(self) -> None:
        self.state = self.graph = self.shape = self.lone = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def fits(self, batch: Batch) -> bool:
        """Whether the set-up shape holds this batch (same rows, prompts and outputs no longer)."""
        return (self.shape is not None and self.shape[0] == batch.size and max(batch.prompt_lens) <= self.shape[1]
                and max(batch.output_lens) <= self.shape[2])

    @torch.inference_mode()
    def generate(self, batch: Batch) -> Generation:
        B, P, N = batch.size, max(batch.prompt_lens), max(batch.output_lens)
        if not self.fits(batch):
            self.setup(B, P, N)
        self.state.step.fill_(1)
        if self.lone is not None:
            prefill = lambda: self.lone.run(0, batch.prompt_ids[0])
        else:
            packed = self._pack(batch.prompt_ids, P)
            prefill = lambda: self.decoder.prefill(packed, self.state)
        if self.device.type == "cuda":
            return self._generate_cuda(prefill, N)
        return self._generate_eager(prefill, N)

    def _pack(self, prompts: list[list[int]], padded_len: int) -> PackedPrefill:
        """A static batch as packed chunks: row b in slot b, right-padded to the longest prompt (the
        padding is computed, as static batching does), its first token read at its own last one."""
        return pack([Chunk(row, 0, p + [PAD_ID] * (padded_len - len(p)), emit=len(p) - 1)
                     for row, p in enumerate(prompts)], self.device, PAD_ID)

    def _generate_cuda(self, prefill: Callable[[], torch.Tensor], n: int) -> Generation:
        self._sync()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        events[0].record()
        prefill()
        events[1].record()
        for k in range(2, n + 1):
            cancel.check()  # a host flag: no device sync
            if self.graph is not None:
                self.graph.replay()
            else:
                self.decoder.decode_step(self.state)
            events[k].record()
        events[-1].synchronize()
        token_ms = [events[0].elapsed_time(e) for e in events[1:]]
        return self._result(token_ms, n, "cuda_events")

    def _generate_eager(self, prefill: Callable[[], torch.Tensor], n: int) -> Generation:
        t0 = time.perf_counter()
        prefill()
        token_ms = [(time.perf_counter() - t0) * 1e3]
        for _ in range(1, n):
            cancel.check()
            self.decoder.decode_step(self.state)
            token_ms.append((time.perf_counter() - t0) * 1e3)
        return self._result(token_ms, n, "perf_counter")

    def _result(self, token_ms: list[float], n: int, timing: str) -> Generation:
        return Generation(token_ms=token_ms, tokens=self.state.out[:, :n].tolist(), timing=timing,
                          kv_allocated_bytes=self.state.kv_bytes, extra=dict(self.last_setup))

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def warm_decode(decoder: FastDecoder, states: list[DecodeState] | list[PagedState], device: torch.device) -> None:
    """Three decode steps per state compile every piece for that width and let the allocator settle;
    on a GPU on a side stream, as graph capture requires of the work before it."""
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    if stream is not None:
        torch.cuda.synchronize(device)
        stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        for state in states:
            for _ in range(3):
                state.step.zero_()
                decoder.decode_step(state)
    if stream is not None:
        torch.cuda.current_stream(device).wait_stream(stream)
        torch.cuda.synchronize(device)


def capture(decoder: FastDecoder, state: DecodeState | PagedState, pool: tuple | None = None
            ) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """One decode step over `state`'s buffers as a CUDA graph (after warm_decode on the same state),
    and the logits tensor each replay rewrites. Graphs that never replay at once may share a memory
    `pool` (another graph's `pool()`)."""
    state.step.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        logits = decoder.decode_step(state)
    return graph, logits


def replay_ms(graph: torch.cuda.CUDAGraph, state: DecodeState, pos: int, replays: int) -> float:
    """Median CUDA-event time of `replays` replays of a captured decode step with every row of `state` at `pos` (a
    step reads each row up to its position, so the time depends on it); the counters are reset before each
    replay, outside its events, and one untimed replay goes first."""
    timed = []
    for k in range(replays + 1):
        state.pos.fill_(pos)
        state.step.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        if k:
            timed.append((start, end))
    timed[-1][1].synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in timed)
