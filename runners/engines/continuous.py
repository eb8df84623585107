"""Continuous batching on the `fast` decoder: one static KV cache whose rows are request slots.

Each step decodes the prefix of slots up to the highest running one, padded to a bucket (powers of
two up to max_num_seqs, each captured once as a CUDA graph on a GPU; eager on CPU), then prefills all
of the step's prompt chunks in one packed forward (runners.engines.ragged), the same prefill the
static engine runs. Free and still-prefilling slots inside the prefix ride along parked
(`active` = 0): their positions do not move, and whatever they write lands where their own next
prefill overwrites it. Those rows are the padding waste.

The host packs the step's prefill while the decode graph runs, and waits once per step (the
scheduler needs its end time to admit arrivals on time); it times the step with perf_counter after
that synchronize, so a step's time includes the host's own scheduling work, as a server's would.
Setup compiles and warms every shape a step can take (each decode bucket, packed prefill), so no
measured step compiles.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import torch

from runners import cancel
from runners.engines.fast import capture, warm_decode
from runners.engines.fast_model import DecodeState, FastDecoder
from runners.engines.ragged import Chunk, pack
from runners.kv_layout import cache_len
from runners.scheduler import Arrivals, Plan, Request, Scheduler


def buckets(max_num_seqs: int) -> list[int]:
    """Decode widths with a graph each: powers of two below max_num_seqs, and max_num_seqs itself."""
    sizes, b = [], 1
    while b < max_num_seqs:
        sizes.append(b)
        b *= 2
    return sizes + [max_num_seqs]


@dataclass
class StepRecord:
    """One engine step as the run folder's steps file needs it (times in seconds from the start)."""

    start_s: float
    end_s: float
    prefill_tokens: int
    decode_tokens: int
    rows: int  # decode width run (bucket), 0 when the step only prefilled
    running: int  # requests holding a slot after the step's admissions
    kv_tokens: int  # KV tokens held by those requests at the step's end


@dataclass
class RunResult:
    """A whole workload run through the scheduler."""

    requests: list[Request]
    steps: list[StepRecord]
    admission_waits: int
    tokens: dict[int, list[int]] = field(default_factory=dict)  # request index → ids, when recorded


OnStep = Callable[[dict[int, int], list[Request], float], None]  # (ids by request index, finished, now)


class Source(Protocol):
    """Where served requests come from: a seeded workload (Scheduled) or a live server's clients."""

    def arrived(self, now: float) -> list[Request]:
        """Requests arrived by `now` (seconds from the loop's start), stamped with their arrival."""
        ...

    def finished(self, r: Request, now: float) -> None: ...

    def wait(self, t0: float) -> bool:
        """Idle (nothing to run) until a request may have arrived; False when none ever will."""
        ...


class Scheduled:
    """A workload's Arrivals as a source: the loop sleeps until the next one is due."""

    def __init__(self, arrivals: Arrivals) -> None:
        self.arrivals = arrivals
        self.arrived, self.finished = arrivals.arrived, arrivals.finished

    def wait(self, t0: float) -> bool:
        wake = self.arrivals.next_time()
        if wake is None:
            return False
        _sleep_until(t0 + wake)
        return True


class ContinuousEngine:
    """Owns the slot cache and the per-bucket graphs of one max_num_seqs."""

    def __init__(self, decoder: FastDecoder, device: torch.device, graphs: bool | None = None) -> None:
        self.decoder, self.device = decoder, device
        self.graphs = device.type == "cuda" if graphs is None else graphs
        self.state: DecodeState | None = None
        self.views: dict[int, DecodeState] = {}
        self.captured: dict[int, torch.cuda.CUDAGraph] = {}

    def setup(self, max_num_seqs: int, max_seq_len: int, token_budget: int | None = None) -> float:
        """Allocate the slot cache, compile and warm every shape a step can take (each decode bucket
        captured; a packed prefill of the whole token budget run once, so the allocator holds its
        largest blocks); returns seconds."""
        self.release()
        max_len = cache_len(max_seq_len)
        t0 = time.perf_counter()
        self.state = self.decoder.new_state(max_num_seqs, max_len, 1)
        self.state.active.zero_()
        self.views = {b: self.state.prefix(b) for b in buckets(max_num_seqs)}
        self._warm_prefill(max_num_seqs, max_len, token_budget)
        for buf in (self.state.pos, self.state.active):
            buf.zero_()
        if self.decoder.compiled or self.graphs:
            warm_decode(self.decoder, list(self.views.values()), self.device)
        if self.graphs:
            self.captured = {width: capture(self.decoder, view)[0] for width, view in self.views.items()}
        self._sync()
        return time.perf_counter() - t0

    def _warm_prefill(self, slots: int, max_len: int, token_budget: int | None) -> None:
        """Packed prefills of one short and several chunks (a continuation among them) compile the
        prefill's pieces for any token count; one of the whole budget (or every slot full) sizes the
        allocator's blocks. All outside every measured step."""
        n = min(8, max_len // 2)
        chunks = [Chunk(0, 0, [1] * n), Chunk(0, n, [1] * n, emit=n - 1)]
        chunks += [Chunk(slot, 0, [1] * n, emit=n - 1) for slot in range(1, min(slots, 4))]
        budget = min(token_budget or slots * max_len, slots * max_len)
        full = [Chunk(slot, 0, [1] * min(max_len, budget - slot * max_len), emit=0)
                for slot in range(-(-budget // max_len))]
        for batch in (chunks[:1], chunks, full):
            self.decoder.prefill(pack(batch, self.device), self.state)

    @property
    def kv_bytes(self) -> int:
        return self.state.kv_bytes if self.state is not None else 0

    @property
    def slots(self) -> int:
        return self.state.rows.numel()

    @property
    def max_len(self) -> int:
        return self.state.key_idx.numel()

    def release(self) -> None:
        self.state, self.views, self.captured = None, {}, {}
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @torch.inference_mode()
    def run(self, prompts: list[list[int]], output_lens: list[int], arrivals: dict, token_budget: int,
            kv_capacity: int, record_tokens: bool = False) -> RunResult:
        """Serve every request; `arrivals` is Arrivals' rate= or concurrency= (and seed=) keywords."""
        requests = [Request(i, len(p), o) for i, (p, o) in enumerate(zip(prompts, output_lens))]
        if max(r.kv_need for r in requests) > self.max_len:
            raise ValueError(f"a request of {max(r.kv_need for r in requests)} tokens exceeds the "
                             f"cache length {self.max_len}")
        tokens: dict[int, list[int]] = {r.index: [] for r in requests} if record_tokens else {}

        def record(made: dict[int, int], finished: list[Request], now: float) -> None:
            for index, token in made.items():
                tokens[index].append(token)

        steps, waits = self.serve(Scheduled(Arrivals(list(requests), **arrivals)), prompts, token_budget,
                                  kv_capacity, record if record_tokens else None)
        return RunResult(requests, steps, waits, tokens)

    @torch.inference_mode()
    def serve(self, source: Source, prompts: Mapping[int, list[int]] | list[list[int]], token_budget: int,
              kv_capacity: int, on_step: OnStep | None = None, t0: float | None = None
              ) -> tuple[list[StepRecord], int]:
        """Serve requests from `source` until it says none will come and none is left; `prompts[r.index]`
        are a request's ids. `on_step(tokens, finished, now)` hears each step's greedy ids by request
        index (read only when it is given) and the requests it finished. Times count from `t0` (the
        host's perf_counter; now by default). Returns the steps and the admission waits."""
        st = self.state
        st.active.zero_()
        sched = Scheduler(self.slots, token_budget, kv_capacity)
        steps: list[StepRecord] = []
        t0, now = (time.perf_counter(), 0.0) if t0 is None else (t0, time.perf_counter() - t0)
        while True:
            cancel.check()
            for r in source.arrived(now):
                sched.add(r)
            plan = sched.plan(now)
            if plan.empty:
                if source.wait(t0):
                    now = time.perf_counter() - t0
                    continue
                if sched.idle:
                    return steps, sched.admission_waits
                raise RuntimeError("no request can be admitted and none will arrive (KV capacity too small)")
            start = now
            rows = self._decode(plan.decodes)  # the graph runs while the host packs the prefill
            emitted = self._prefill(prompts, plan.prefills)
            self._sync()
            now = time.perf_counter() - t0
            made = self._tokens(plan, emitted, rows) if on_step is not None else {}
            finished = sched.commit(plan, now)
            for r in finished:
                st.active[r.slot] = 0
                source.finished(r, now)
            if on_step is not None:
                on_step(made, finished, now)
            steps.append(StepRecord(start, now, plan.prefill_tokens, len(plan.decodes), rows,
                                    len(sched.running), sched.kv_held()))

    def _decode(self, rows: list[Request]) -> int:
        """One decode step over the smallest bucket covering every decoding slot; returns its width."""
        if not rows:
            return 0
        top = max(r.slot for r in rows) + 1
        width = next(b for b in self.views if b >= top)
        view = self.views[width]
        view.step.zero_()
        if width in self.captured:
            self.captured[width].replay()
        else:
            self.decoder.decode_step(view)
        return width

    def _prefill(self, prompts: Mapping[int, list[int]] | list[list[int]], prefills: list[tuple[Request, int, int]]
                 ) -> tuple[list[int], torch.Tensor] | None:
        """Every chunk of the step in one packed forward; a prompt's last chunk arms its slot for
        decoding. Returns the emitting requests' indices and their logits (read only when recorded)."""
        if not prefills:
            return None
        chunks = [Chunk(r.slot, pos, prompts[r.index][pos:pos + n], emit=n - 1 if pos + n == r.prompt_len else None)
                  for r, pos, n in prefills]
        logits = self.decoder.prefill(pack(chunks, self.device), self.state)
        return [r.index for (r, _, _), c in zip(prefills, chunks) if c.emit is not None], logits

    def _tokens(self, plan: Plan, emitted: tuple[list[int], torch.Tensor] | None, rows: int) -> dict[int, int]:
        """The step's greedy id per request index (tests compare them with the static engine's; the
        server streams them)."""
        fed = self.state.out[:rows, 0].tolist() if rows else []
        made = {r.index: fed[r.slot] for r in plan.decodes}
        if emitted is not None:
            made.update(zip(emitted[0], emitted[1].argmax(dim=-1).tolist()))
        return made

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def _sleep_until(deadline: float) -> None:
    """Idle until the next arrival, in short naps so a cancel is seen within a tenth of a second."""
    while (left := deadline - time.perf_counter()) > 0:
        cancel.check()
        time.sleep(min(left, 0.1))
