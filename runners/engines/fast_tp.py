"""Tensor-parallel `fast`: each rank holds a shard of every layer and sums partial outputs over ranks.

Column-parallel: QKV (this rank's query heads and its KV heads) and gate/up (its slice of the
intermediate size), so attention and SiLU·up run on local data only. Row-parallel: o_proj and
down_proj read only this rank's columns, so their outputs are partial sums that one all-reduce per
half-layer completes. Embeddings, the final norm and lm_head stay replicated: a vocab-parallel head
would need a logits all-gather (or a distributed argmax) every step, while with the whole head on
every rank each rank computes the same logits from the same all-reduced hidden state, so the greedy
token is identical everywhere without another collective. The cost is vocab × hidden weights per rank.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import Tensor

from runners.engines.base import Batch, Generation
from runners.engines.fast import FastEngine, capture, replay_ms
from runners.engines.fast_model import FastDecoder, LayerWeights
from runners.engines.models import LoadedModel
from runners.engines.quant_layout import QUANT_DTYPES

PROBE_REPLAYS = 9


class AllReduce:
    """A sum over the group, timing each call while `timing` is on.

    CPU: perf_counter around the blocking collective. CUDA: events on the current stream around it.
    Either way the time includes waiting for the slowest rank to arrive, as the step itself does.
    """

    def __init__(self, group: dist.ProcessGroup, device: torch.device) -> None:
        self.group, self.cuda = group, device.type == "cuda"
        self.timing = False
        self._ms: list[float] = []
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def __call__(self, x: Tensor) -> Tensor:
        if not self.timing:
            dist.all_reduce(x, group=self.group)
        elif self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dist.all_reduce(x, group=self.group)
            end.record()
            self._events.append((start, end))
        else:
            t0 = time.perf_counter()
            dist.all_reduce(x, group=self.group)
            self._ms.append((time.perf_counter() - t0) * 1e3)
        return x

    def take(self) -> list[float]:
        """Milliseconds of each timed call since the last take, in call order."""
        if self._events:
            self._events[-1][1].synchronize()
        ms = self._ms + [start.elapsed_time(end) for start, end in self._events]
        self._ms, self._events = [], []
        return ms


class ShardedDecoder(FastDecoder):
    """FastDecoder on this rank's shard; heads and kv_heads are the local counts."""

    def __init__(self, hf_model: torch.nn.Module, config, group: dist.ProcessGroup) -> None:
        super().__init__(hf_model, config)
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        inter = config.intermediate_size
        if self.kv_heads % world or self.heads % world or inter % world:
            raise ValueError(f"tensor parallel {world} must divide heads ({self.heads}), KV heads "
                             f"({self.kv_heads}) and intermediate size ({inter})")
        self.world = world
        self.all_reduce = AllReduce(group, self.device)
        self.communicate = True  # off only while the comm probe captures its step without all-reduces
        self.layers = [self._shard(w, rank, world, inter) for w in self.layers]
        self.heads //= world
        self.kv_heads //= world
        self.attn_fn = self.decode_attn

    def _shard(self, w: LayerWeights, rank: int, world: int, inter: int) -> LayerWeights:
        d, hq, hkv = self.head_dim, self.heads // world, self.kv_heads // world
        starts = (rank * hq * d, (self.heads + rank * hkv) * d, (self.heads + self.kv_heads + rank * hkv) * d)
        qkv = lambda t: torch.cat([t[starts[0]:starts[0] + hq * d], t[starts[1]:starts[1] + hkv * d],
                                   t[starts[2]:starts[2] + hkv * d]])
        i0, i1 = rank * inter // world, (rank + 1) * inter // world
        return LayerWeights(
            attn_norm=w.attn_norm, wqkv=qkv(w.wqkv), bqkv=None if w.bqkv is None else qkv(w.bqkv),
            wo=w.wo[:, rank * hq * d:(rank + 1) * hq * d].contiguous(),
            bo=w.bo if rank == 0 else None,  # added once, before the sum
            mlp_norm=w.mlp_norm, w13=torch.cat([w.w13[i0:i1], w.w13[inter + i0:inter + i1]]),
            w2=w.w2[:, i0:i1].contiguous(),
        )

    def enable_compile(self) -> None:
        """Compile the two halves of a decode layer, not the layer: the all-reduces stay outside
        compiled code, so Dynamo never traces a collective, and graph capture records them as NCCL
        kernels. (The MLP half is the base class's compiled `mlp_fn`.)"""
        super().enable_compile()
        self.layer_fn = self.decode_layer
        self.attn_fn = torch.compile(self.decode_attn, dynamic=True, fullgraph=True)

    def decode_layer(self, h: Tensor, attn_norm: Tensor, wqkv: Tensor, bqkv: Tensor | None, wo: Tensor,
                     bo: Tensor | None, mlp_norm: Tensor, w13: Tensor, w2: Tensor, kc: Tensor, vc: Tensor,
                     cos: Tensor, sin: Tensor, written: Tensor, table: Tensor, lens: Tensor,
                     block_size: int) -> Tensor:
        h = h + self.reduce(self.attn_fn(h, attn_norm, wqkv, bqkv, wo, bo, kc, vc, cos, sin, written, table, lens,
                                         block_size))
        return h + self.reduce(self.mlp_fn(h, mlp_norm, w13, w2))

    def reduce(self, x: Tensor) -> Tensor:
        return self.all_reduce(x) if self.communicate else x

    def weight_bytes(self) -> int:
        """Bytes of the weights this rank holds (its shards plus the replicated embeddings and head)."""
        tied = self.lm_head.data_ptr() == self.embed.data_ptr()
        tensors = [self.embed, self.norm] + ([] if tied else [self.lm_head])
        for w in self.layers:
            tensors += [t for t in (w.attn_norm, w.wqkv, w.bqkv, w.wo, w.bo, w.mlp_norm, w.w13, w.w2) if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)


class TensorParallelEngine(FastEngine):
    """One rank of a tensor-parallel `fast` engine; every rank runs the same calls in the same order.

    Communication time per decode step: eager steps (CPU, or CUDA without graphs) time every
    collective of the measured steps themselves. A CUDA-graph replay hides its collectives from the
    host and from events, so setup measures them by difference: the step's graph replayed against
    the same step captured without its all-reduces, both on this shape's buffers. The difference is
    what the all-reduces add to the step (they sit on its critical path: nothing overlaps them in a
    decode step), and every batch of that shape reports it. Timing each all-reduce eagerly instead
    measured the host: an eager step's collectives wait for the slower rank to launch its kernels.
    """

    def __init__(self, loaded: LoadedModel, group: dist.ProcessGroup) -> None:
        if loaded.info.dtype in QUANT_DTYPES:
            raise ValueError(f"tensor parallel does not implement quantised weights ({loaded.info.dtype})")
        decoder = ShardedDecoder(loaded.model, loaded.config, group)
        loaded.model.model.layers = torch.nn.ModuleList()  # the full layers are never read again: free them
        super().__init__(loaded, decoder=decoder)
        self.group, self.world = group, decoder.world
        self.calls_per_step = 2 * len(decoder.layers)
        self.probe: tuple[float, float] | None = None
        self._check_same_replicated_weights()
        self._facts = {"tensor_parallel": self.world,  # model.json's byte counts are one rank's
                       "weight_bytes": decoder.weight_bytes(),
                       "kv_bytes_per_token": loaded.info.kv_bytes_per_token // self.world}

    def version(self) -> str:
        return f"{super().version()}; tensor parallel {self.world}"

    def _check_same_replicated_weights(self) -> None:
        """Random preset weights come from each rank's own generator: equal seeds must give equal
        embeddings and head, or the ranks would compute different models. (It also opens NCCL
        before any graph capture.)"""
        sums = torch.stack([self.decoder.embed.sum(dtype=torch.float64),
                            self.decoder.lm_head.sum(dtype=torch.float64)])
        lo, hi = sums.clone(), sums.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=self.group)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=self.group)
        if not torch.equal(lo, hi):
            raise RuntimeError("tensor-parallel ranks loaded different embeddings: the seed did not "
                               "reproduce the same random weights on every device")

    def setup(self, batch_size: int, max_prompt_len: int, max_output_len: int) -> float:
        total = super().setup(batch_size, max_prompt_len, max_output_len)
        if self.graph is not None:
            t0 = time.perf_counter()
            self.probe = self._probe_comm()
            self.last_setup["comm_probe_s"] = time.perf_counter() - t0
            total += self.last_setup["comm_probe_s"]
        return total

    def _probe_comm(self) -> tuple[float, float]:
        """(all-reduce ms, step ms) per decode step: medians of PROBE_REPLAYS replays of the step's
        graph and of the same step captured without all-reduces (its sums are then wrong, which a
        timing does not mind). The next batch's prefill rewrites the cache and counters they touch."""
        self.decoder.communicate = False
        try:
            silent, _ = capture(self.decoder, self.state)
        finally:
            self.decoder.communicate = True
        step_ms, silent_ms = self._replay_ms(self.graph), self._replay_ms(silent)
        return max(0.0, step_ms - silent_ms), step_ms

    def _replay_ms(self, graph: torch.cuda.CUDAGraph) -> float:
        """A replay's time at the shape's mid-decode position: its longest prompt plus half its longest output."""
        _, prompt_len, output_len = self.shape
        return replay_ms(graph, self.state, prompt_len + output_len // 2, PROBE_REPLAYS)

    def generate(self, batch: Batch) -> Generation:
        if not self.fits(batch):
            self.setup(batch.size, max(batch.prompt_lens), max(batch.output_lens))
        if self.graph is not None:
            gen = super().generate(batch)
            comm_ms, step_ms = self.probe
            gen.extra.update(comm_ms_per_step=comm_ms, comm_share=comm_ms / step_ms, comm_source="cuda_graph_difference")
            return gen
        reducer = self.decoder.all_reduce
        reducer.timing = True
        try:
            gen = super().generate(batch)
        finally:
            reducer.timing = False
        decode_comm = reducer.take()[self.calls_per_step:]  # the first forward is the prefill
        steps = len(gen.token_ms) - 1
        decode_ms = gen.token_ms[-1] - gen.token_ms[0]
        gen.extra.update(comm_ms_per_step=sum(decode_comm) / steps if steps else None,
                         comm_share=sum(decode_comm) / decode_ms if steps and decode_ms > 0 else None,
                         comm_source=gen.timing)
        return gen
