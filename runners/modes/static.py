"""Static batching: one batch size per point, each repeat one padded batch prefilled and decoded
together (docs/design.md §2)."""
from __future__ import annotations

import functools
import time

from runners.metrics.interval import Interval, StaticDraw, by_draws, host_draws, static_interval
from runners.metrics.replicated import batch_repeat
from runners.metrics.static import StaticRepeat, summarise
from runners.metrics.summary import Summary
from runners.metrics.utilisation import Window
from runners.modes.context import PointContext
from runners.spec.registry import static_rows_padded
from runners.spec.static import StaticPoint
from runners.workload import workload


def run_point(ctx: PointContext, index: int, point: StaticPoint) -> Summary:
    return ctx.run(index, point, StaticRun(ctx, index, point))


class StaticRun:
    """Each batch size draws its own batches; the engine sets up for the longest of them."""

    def __init__(self, ctx: PointContext, index: int, point: StaticPoint) -> None:
        self.ctx, self.index, self.size, spec = ctx, index, point.batch_size, ctx.spec
        self.batches = {r: workload.draw(spec, self.size, r, ctx.info.vocab, workload.STATIC)
                        for r in spec.repeat_indices()}
        self.columns = {"tensor_parallel": spec.tensor_parallel, "replicas": spec.replicas}
        self.release = ctx.engine.release

    def setup(self) -> float:
        return self.ctx.engine.setup(self.size, max(max(b.prompt_lens) for b in self.batches.values()),
                                     max(max(b.output_lens) for b in self.batches.values()))

    def repeat(self, run: int, draw: int) -> tuple[StaticRepeat, Window]:
        batch = self.batches[draw]
        start = time.perf_counter()
        gen = self.ctx.engine.generate(batch)
        window = Window(run, start, start + gen.token_ms[0] / 1000, start + gen.token_ms[-1] / 1000)
        return batch_repeat(self.index, run, batch, gen), window

    def interval(self, draws: list[StaticRepeat]) -> Interval:
        """The step-time model's expectation over host draws, checked against each measured draw; with
        replicas each replica pads to its own share, which the model does not see, so draws alone."""
        if self.ctx.spec.replicas > 1:
            return by_draws([rep.row["output_tokens_per_s"] for rep in draws])
        measured = [StaticDraw(r.batch.prompt_lens, r.batch.output_lens, r.row["prefill_ms"],
                               [(s["step_index"], s["duration_ms"]) for s in r.steps if s["phase"] == "decode"],
                               r.row["output_tokens_per_s"]) for r in draws]
        return static_interval(measured, self.host, static_rows_padded(self.ctx.spec.engine))

    @functools.cached_property
    def host(self) -> list[tuple[list[int], list[int]]]:
        """The lengths the model is averaged over, drawn once for the point."""
        return host_draws(lambda k: self.ctx.spec.request_lengths(self.size, k))

    def summarise(self, repeats: list[StaticRepeat]) -> Summary:
        return summarise(self.index, self.size, repeats, self.ctx.spec.warmup)

    def kv_bytes(self, repeats: list[StaticRepeat]) -> tuple[int, int]:
        used = max(sum(r.batch.prompt_lens) + sum(r.batch.output_lens) for r in repeats)
        return max(r.gen.kv_allocated_bytes for r in repeats), used * self.ctx.info.kv_bytes_per_token

    def done(self, summary: Summary) -> str:
        return f"{summary['output_tokens_per_s']:.1f} out tok/s"
