"""Continuous batching on the `fast` decoder: one static KV cache whose rows are request slots.

Each step decodes the prefix of slots up to the highest running one, padded to a bucket (powers of
two up to max_num_seqs, each captured once as a CUDA graph on a GPU; eager on CPU), then prefills the
step's prompt chunks one request at a time into their slots. Free and still-prefilling slots inside
the prefix ride along parked (`active` = 0): their positions do not move, and whatever they write
lands where their own next prefill overwrites it. Those rows are the padding waste.

The host waits for every step (the scheduler needs its end time to admit arrivals on time), and
times it with perf_counter after the synchronize.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from runners import cancel
from runners.engines.fast_model import DecodeState, FastDecoder
from runners.kv_layout import cache_len
from runners.scheduler import Arrivals, Request, Scheduler


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


class ContinuousEngine:
    """Owns the slot cache and the per-bucket graphs of one max_num_seqs."""

    def __init__(self, decoder: FastDecoder, device: torch.device, graphs: bool | None = None) -> None:
        self.decoder, self.device = decoder, device
        self.graphs = device.type == "cuda" if graphs is None else graphs
        self.state: DecodeState | None = None
        self.views: dict[int, DecodeState] = {}
        self.captured: dict[int, torch.cuda.CUDAGraph] = {}

    def setup(self, max_num_seqs: int, max_seq_len: int) -> float:
        """Allocate the slot cache, compile/warm every bucket and capture it; returns seconds."""
        self.release()
        max_len = cache_len(max_seq_len)
        t0 = time.perf_counter()
        self.state = self.decoder.new_state(max_num_seqs, max_len, 1)
        self.state.active.zero_()
        self.views = {b: _prefix(self.state, b) for b in buckets(max_num_seqs)}
        warm = torch.ones(min(8, max_len), dtype=torch.long, device=self.device)
        self.decoder.prefill_slot(warm, 0, 0, self.state)  # compiles prefill's pieces outside any TTFT
        self.decoder.prefill_slot(warm, 0, warm.numel(), self.state)  # and the chunked (masked) path
        if self.graphs:
            self._sync()
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):  # compiles each width on first use, then runs warm
                for view in self.views.values():
                    for _ in range(3):
                        view.step.zero_()
                        self.decoder.decode_step(view)
            torch.cuda.current_stream(self.device).wait_stream(side)
            self._sync()
            for width, view in self.views.items():
                view.step.zero_()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    self.decoder.decode_step(view)
                self.captured[width] = graph
        self._sync()
        return time.perf_counter() - t0

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
        st = self.state
        st.active.zero_()
        requests = [Request(i, len(p), o) for i, (p, o) in enumerate(zip(prompts, output_lens))]
        if max(r.kv_need for r in requests) > self.max_len:
            raise ValueError(f"a request of {max(r.kv_need for r in requests)} tokens exceeds the "
                             f"cache length {self.max_len}")
        source = Arrivals(list(requests), **arrivals)
        sched = Scheduler(self.slots, token_budget, kv_capacity)
        steps: list[StepRecord] = []
        tokens: dict[int, list[int]] = {r.index: [] for r in requests} if record_tokens else {}
        done = 0
        t0 = time.perf_counter()
        now = 0.0
        while done < len(requests):
            cancel.check()
            for r in source.arrived(now):
                sched.add(r)
            plan = sched.plan(now)
            if plan.empty:
                wake = source.next_time()
                if wake is None:
                    raise RuntimeError("no request can be admitted and none will arrive (KV capacity too small)")
                time.sleep(max(0.0, wake - (time.perf_counter() - t0)))
                now = time.perf_counter() - t0
                continue
            start = now
            rows = self._decode(plan.decodes)
            first = {r.index: self._prefill(prompts[r.index], r, pos, n) for r, pos, n in plan.prefills}
            self._sync()
            now = time.perf_counter() - t0
            if record_tokens:
                self._record(tokens, plan, first, rows)
            for r in sched.commit(plan, now):
                st.active[r.slot] = 0
                source.finished(r, now)
                done += 1
            steps.append(StepRecord(start, now, plan.prefill_tokens, len(plan.decodes), rows,
                                    len(sched.running), sched.kv_held()))
        return RunResult(requests, steps, sched.admission_waits, tokens)

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

    def _prefill(self, prompt: list[int], r: Request, pos: int, n: int) -> torch.Tensor | None:
        """Prefill one chunk into the request's slot; the last chunk arms the slot for decoding."""
        st, slot = self.state, r.slot
        ids = torch.tensor(prompt[pos:pos + n], dtype=torch.long, device=self.device)
        logits = self.decoder.prefill_slot(ids, slot, pos, st)
        end = pos + n
        st.cache_pos[slot] = end
        st.rope_pos[slot] = end
        st.start[slot] = 0
        if end < r.prompt_len:
            return None
        first = logits.argmax()
        st.tokens[slot] = first
        st.active[slot] = 1
        return first

    def _record(self, tokens: dict[int, list[int]], plan, first: dict, rows: int) -> None:
        """Greedy ids per request (tests compare them with the static engine's)."""
        fed = self.state.out[:rows, 0].tolist() if rows else []
        for r in plan.decodes:
            tokens[r.index].append(fed[r.slot])
        for index, tok in first.items():
            if tok is not None:
                tokens[index].append(int(tok))

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def _prefix(st: DecodeState, rows: int) -> DecodeState:
    """Views of the first `rows` slots: a captured step over them writes the shared cache in place."""
    return replace(st, k=[t[:rows] for t in st.k], v=[t[:rows] for t in st.v], tokens=st.tokens[:rows],
                   rope_pos=st.rope_pos[:rows], cache_pos=st.cache_pos[:rows], start=st.start[:rows],
                   rows=st.rows[:rows], out=st.out[:rows], active=st.active[:rows])
