"""Continuous batching (online serving): every point serves the same seeded workload through a slot
cache of max_num_seqs rows, with its arrival rate or clients (docs/design.md §2)."""
from __future__ import annotations

import functools
import time
from typing import Any

import torch

from runners.engines.base import Batch, Engine
from runners.engines.continuous import ContinuousEngine
from runners.engines.fast import FastEngine
from runners.metrics.continuous import ContinuousRepeat, continuous_repeat, summarise
from runners.metrics.interval import Interval, by_draws
from runners.metrics.open_loop import host_draws, open_loop_draw, open_loop_interval
from runners.metrics.summary import Summary
from runners.metrics.utilisation import Window
from runners.modes.context import PointContext
from runners.spec.continuous import ContinuousPoint, longest_request, requests_per_point
from runners.spec.endpoint import EndpointPoint
from runners.workload import workload


def run_point(ctx: PointContext, index: int, point: ContinuousPoint) -> Summary:
    return ctx.run(index, point, ContinuousRun(ctx, index, point))


def serving_engine(engine: Engine, device: torch.device) -> ContinuousEngine:
    """A slot-cache engine over the static engine's decoder: only `fast` has one to share."""
    if not isinstance(engine, FastEngine):
        raise ValueError(f"continuous mode runs on the fast engine, not {engine.name}")
    return ContinuousEngine(engine.decoder, device, graphs=engine.graphs)


def load(ctx: PointContext, point: ContinuousPoint | EndpointPoint) -> tuple[dict[int, Batch], dict[str, Any]]:
    """Each repeat's seeded requests (with requests per client, the first of them), and how they arrive (a rate
    or clients); the endpoint mode sends the same load to a server."""
    spec = ctx.spec
    served = requests_per_point(spec.num_requests, spec.requests_per_client, point.concurrency)
    work = {r: first(workload.draw(spec, spec.num_requests, r, ctx.info.vocab, workload.CONTINUOUS), served)
            for r in spec.repeat_indices()}
    arrivals = (dict(rate=point.arrival_rate) if point.arrival_rate is not None else
                dict(concurrency=point.concurrency, think_s=spec.think_ms / 1e3))
    return work, arrivals


def first(batch: Batch, n: int) -> Batch:
    """The first `n` requests of a drawn workload: every point's requests are the same ones, however many it serves."""
    return Batch(prompt_ids=batch.prompt_ids[:n], output_lens=batch.output_lens[:n])


def load_columns(point: ContinuousPoint | EndpointPoint) -> dict[str, Any]:
    """The summary columns that say which load a point ran, whatever its outcome."""
    return {"sweep_axis": point.axis, "sweep_value": point.value, "max_num_seqs": point.max_num_seqs,
            "arrival_rate": point.arrival_rate, "concurrency": point.concurrency}


class ContinuousRun:
    """The workload's requests arrive by rate or clients; the block pool holds their KV, each slot's table
    as long as the longest of them."""

    def __init__(self, ctx: PointContext, index: int, point: ContinuousPoint) -> None:
        self.ctx, self.index, self.point = ctx, index, point
        self.work, self.arrivals = load(ctx, point)
        self.served = serving_engine(ctx.engine, ctx.device)
        self.release = self.served.release
        self.capacity = 0
        self.columns = load_columns(point)

    def setup(self) -> float:
        spec = self.ctx.spec
        seconds = self.served.setup(self.point.max_num_seqs, longest_request(spec), spec.max_num_batched_tokens,
                                    spec.kv_cache_tokens or None, spec.gpu_memory_utilization)
        self.capacity = self.served.capacity_tokens
        return seconds

    def repeat(self, run: int, draw: int) -> tuple[ContinuousRepeat, Window]:
        spec, batch = self.ctx.spec, self.work[draw]
        start = time.perf_counter()
        result = self.served.run(batch.prompt_ids, batch.output_lens,
                                 {**self.arrivals, "seed": workload.arrival_seed(spec, draw)},
                                 spec.max_num_batched_tokens)
        # steps mix prefill and decode, so a measured repeat's samples are all tagged decode
        window = Window(run, start, start, start + result.steps[-1].end_s)
        return continuous_repeat(self.index, run, self.point.batch_size, result, spec.slo_metric,
                                 spec.slo_ms), window

    def interval(self, draws: list[ContinuousRepeat]) -> Interval:
        """An open-loop draw is predicted by the slot-queue model (runners.metrics.open_loop); a closed loop's
        draw, whose clients wait on the requests they sent, by none: draws alone."""
        if self.point.arrival_rate is None:
            return by_draws([rep.row["output_tokens_per_s"] for rep in draws])
        return open_loop_interval([open_loop_draw(rep.requests, rep.row) for rep in draws], self.point.max_num_seqs,
                                  self.host_draws)

    @functools.cached_property
    def host_draws(self) -> list[tuple[list[float], list[int]]]:
        """Drawn once a point, on its first interval."""
        spec = self.ctx.spec
        return host_draws(spec, self.point.arrival_rate,
                          requests_per_point(spec.num_requests, spec.requests_per_client, self.point.concurrency))

    def summarise(self, repeats: list[ContinuousRepeat]) -> Summary:
        spec = self.ctx.spec
        return summarise(self.index, self.point.batch_size, repeats, spec.warmup, self.served.pool_blocks,
                         self.served.block_size, spec.slo_metric, spec.slo_ms)

    def kv_bytes(self, repeats: list[ContinuousRepeat]) -> tuple[int, int]:
        """The block pool is KV allocated; the most blocks ever held (whole blocks, as the pool hands
        them out) are KV used."""
        blocks = max(s["kv_blocks"] for rep in repeats for s in rep.steps)
        return self.served.kv_bytes, blocks * self.served.block_size * self.ctx.info.kv_bytes_per_token

    def done(self, summary: Summary) -> str:
        return (f"{summary['output_tokens_per_s']:.1f} out tok/s, goodput {summary['goodput_rps']:.2f} req/s, "
                f"{summary['admission_waits']} admission waits, {summary['preemptions']} preemptions, "
                f"KV blocks peak {summary['kv_blocks_peak']} of {summary['kv_blocks_total']}")
