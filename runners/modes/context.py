"""What a mode's `run_point` works with: the sweep's spec, model facts and engine, stage reporting,
the memory baseline and split, the failure guard, and the write-out of a point's files.

Public and typed, so a new mode needs nothing private from the sweep. `PointContext.run` composes the
pieces for a point that sets up once and runs its repeats (both modes so far); a mode whose points
have another shape calls the pieces itself.
"""
from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch

from runners import cancel
from runners.engines.base import Engine
from runners.engines.models import ModelInfo
from runners.metrics import memory
from runners.metrics.interval import Interval
from runners.metrics.repeat import Repeat
from runners.metrics.summary import Summary, failed
from runners.metrics.utilisation import Window, tag_samples, utilisation
from runners.modes import draws
from runners.results.progress import Progress
from runners.results.runfolder import RunWriter
from runners.spec import Point, SweepSpec
from runners.telemetry import fingerprint
from runners.telemetry.telemetry import Sampler, rss_bytes

OOM_ERRORS = (torch.OutOfMemoryError, MemoryError)
# an OOM some raise as a plain RuntimeError: compilers wrap CUDA's, torch's CPU allocator has its own words
OOM_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory")
R = TypeVar("R", bound=Repeat)


class PointRun(Protocol[R]):
    """One point's engine work as a mode does it; PointContext.run drives it through the stages."""

    columns: dict[str, Any]  # summary columns that describe the point whatever its outcome

    def setup(self) -> float:
        """Allocate and warm this point's shape; returns its seconds."""
        ...

    def repeat(self, run: int, draw: int) -> tuple[R, Window]:
        """Measure run number `run` on draw `draw`'s requests (warm-up ones are numbered below zero) and say
        when it ran on the host clock."""
        ...

    def interval(self, draws: list[R]) -> Interval:
        """The expected throughput and its 95 % interval from each draw's first run (runners.metrics.interval)."""
        ...

    def summarise(self, repeats: list[R]) -> Summary: ...

    def kv_bytes(self, repeats: list[R]) -> tuple[int, int]:
        """KV cache bytes allocated, and used at the most (not asked of a context without an engine)."""
        ...

    def release(self) -> None: ...

    def done(self, summary: Summary) -> str:
        """What a measured point achieved, for the log."""
        ...


class StoreClock:
    """How long a point's store stage spends in each part (summarise, release, gc, empty_cache, samples, write),
    for the log: so time between a point's last draw and its line is seen where it goes (0.6–1.2 s a point on an
    H200, docs/benchmarks.md) rather than guessed at."""

    def __init__(self) -> None:
        self.last: float | None = None  # not started: the point is still measuring
        self.parts: dict[str, float] = {}

    def start(self) -> None:
        """Start timing, if not yet started (a failed point starts at its release)."""
        if self.last is None:
            self.last = time.perf_counter()

    def mark(self, part: str) -> None:
        """The time since the previous mark (or the start) goes to `part`."""
        now = time.perf_counter()
        since = now if self.last is None else self.last
        self.parts[part] = self.parts.get(part, 0.0) + now - since
        self.last = now

    def words(self) -> str:
        """'stored in 1.23 s: summarise 0.10, release 0.91, …', in the order the parts ran."""
        parts = ", ".join(f"{name} {seconds:.2f}" for name, seconds in self.parts.items())
        return f"stored in {sum(self.parts.values()):.2f} s: {parts}"


@dataclass
class Stages:
    """Where the sweep is, told to the status file, the sampler (which tags its samples by it) and the
    terminal's progress bar."""

    folder: RunWriter
    sampler: Sampler
    progress: Progress
    repeats: int  # measured runs a point may take at most

    def __call__(self, index: int, point: Point | None, stage: str, repeat: int | None = None) -> None:
        """`point` is None before the points (load, calibrate); the bar names it on its own axis."""
        self.sampler.set_context(index, stage)
        self.folder.update(current={"point_index": index if index >= 0 else None,
                                    "batch_size": None if point is None else point.batch_size,
                                    "stage": stage, "repeat": repeat})
        self.progress.show(index, None if point is None else point.label, stage, repeat, self.repeats)


@dataclass
class PointContext:
    """One sweep's instruments, handed to every point of it."""

    spec: SweepSpec
    device: torch.device
    info: ModelInfo  # the model's facts as model.json states them (the engine's included)
    engine: Engine | None  # None for an endpoint: its server runs the model
    folder: RunWriter
    sampler: Sampler
    stage: Stages

    def run(self, index: int, point: Point, work: PointRun[R]) -> Summary:
        """Setup, warm-up and measured runs under the failure guard, then the memory split (without an
        engine only the server's GPU memory in use, from the samples: `write`), the point's columns and its
        files. Measured runs go on until the throughput is known (runners.modes.draws)."""
        rss_before = self.memory_baseline()
        repeats: list[R] = []
        windows: list[Window] = []
        setup_s = 0.0

        def measure() -> Summary:
            nonlocal setup_s
            self.stage(index, point, "setup")
            setup_s = work.setup()
            for draw in range(-self.spec.warmup, 0):
                self.stage(index, point, "warmup", 0)
                work.repeat(draw, draw)
            made: list[draws.Run] = []
            start = time.perf_counter()
            for run in draws.runs(self.spec, lambda: work.interval(_firsts(repeats, made)),
                                  lambda: time.perf_counter() - start):
                self.stage(index, point, "measure", run.number)
                result, window = work.repeat(run.number, run.draw)
                result.row.update(draw=run.draw, replay=run.replay)
                repeats.append(result)
                windows.append(window.loaded(result.row))
                made.append(run)
            self.stage(index, point, "store")  # summarised, released and written: no longer measuring
            clock.start()
            found = work.interval(_firsts(repeats, made))
            predicted = dict(zip(sorted({r.draw for r in made}), found.predicted))
            for result, run in zip(repeats, made):
                result.row["predicted_tokens_per_s"] = predicted.get(run.draw)
            summary = work.summarise(repeats)
            summary.update(**found.columns(), **draws.outcome(self.spec, found, made, time.perf_counter() - start),
                           replay_spread=draws.replay_spread({r: rep.row["output_tokens_per_s"]
                                                              for r, rep in zip(made, repeats)}),
                           requests=sum(len(rep.requests) for rep in repeats))
            if self.engine is not None:
                summary.update(**self.memory(*work.kv_bytes(repeats), rss_before))
            clock.mark("summarise")
            return summary

        clock = StoreClock()
        summary = self.measure(index, point.batch_size, measure, work.release, clock)
        summary.update(setup_ms=setup_s * 1000.0, added_for=point.added_for, **work.columns)
        written = self.write(index, point, summary, repeats, windows, work.done, clock)
        self.folder.log(f"point {index} {clock.words()}")
        return written

    def memory_baseline(self) -> int:
        """Start a point's memory accounting: reset the allocator's peaks; returns the RSS before it."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        return rss_bytes()

    def memory(self, kv_allocated: int, kv_used: int, rss_before: int) -> dict[str, int | None]:
        """The memory split from the allocator's peaks on a GPU, or from the RSS growth on a CPU."""
        weights = self.info.weight_bytes
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            return memory.split(capacity=total, weights=weights, kv_allocated=kv_allocated, kv_used=kv_used,
                                peak_allocated=torch.cuda.max_memory_allocated(self.device),
                                reserved=torch.cuda.max_memory_reserved(self.device), device_used=total - free)
        growth = max(0, self.sampler.peak_rss() - rss_before)  # RSS growth holds KV too
        return memory.split(capacity=fingerprint.total_ram(), weights=weights, kv_allocated=kv_allocated,
                            kv_used=kv_used, peak_allocated=weights + growth, reserved=None, device_used=None)

    def measure(self, index: int, batch_size: int, measure: Callable[[], Summary],
                release: Callable[[], None], clock: StoreClock) -> Summary:
        """`measure()`'s summary; an OOM or error becomes the point's status instead, a cancel goes on up,
        and the engine's buffers are released whatever happened (each part timed on `clock`)."""
        try:
            return measure()
        except OOM_ERRORS as err:
            return failed(index, batch_size, "oom", err, self.spec.warmup)
        except cancel.Cancelled:
            self.sampler.drain()
            raise
        except RuntimeError as err:  # classified by its text (OOM_WORDS)
            status = "oom" if any(words in str(err).lower() for words in OOM_WORDS) else "error"
            return failed(index, batch_size, status, err, self.spec.warmup)
        finally:
            clock.start()
            release()
            clock.mark("release")
            gc.collect()
            clock.mark("gc")
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
                clock.mark("empty_cache")

    def write(self, index: int, point: Point, summary: Summary, repeats: Sequence[Repeat], windows: list[Window],
              done: Callable[[Summary], str], clock: StoreClock) -> Summary:
        """Utilisation from the point's samples, then its files (detail rows only for a measured point)
        and a log line; `done(summary)` says what a measured point achieved."""
        kept = list(repeats) if summary.ok else []
        samples = tag_samples(self.sampler.drain(), windows)
        summary.update(**utilisation(samples, index, windows, sum(rep.row["output_tokens"] for rep in kept)))
        if self.engine is None and summary.ok:
            summary.update(**memory.served(samples, index, self.sampler.memory_total()))
        clock.mark("samples")
        for row in samples:
            del row["stage"], row["loaded"]
        parts = {"samples": samples}
        if kept:
            parts.update(requests=[r for rep in kept for r in rep.requests],
                         steps=[s for rep in kept for s in rep.steps], repeats=[rep.row for rep in kept])
        self.folder.write_point(index, parts, summary.row())
        clock.mark("write")
        self.folder.log(f"point {index} {point.label}: {summary['status']} "
                        + (f"{done(summary)}, {draws.words(summary.row())}" if summary.ok else summary["error"]))
        return summary


def _firsts(repeats: Sequence[R], made: list[draws.Run]) -> list[R]:
    """Each draw's first run, in draw order: the sample the interval is read from (replays repeat a draw)."""
    return [rep for rep, run in zip(repeats, made) if run.replay == 0]
