"""Continuous batching on the `fast` decoder: a paged KV cache whose block tables follow the scheduler.

Each step decodes the slots that have a token to feed, gathered and padded to a width with a graph
(`buckets`; captured once each on a GPU, eager on CPU), then prefills all
of the step's prompt chunks in one packed forward (runners.engines.ragged), the same prefill the
static engine runs. K/V live in a pool of fixed-size blocks (runners.engines.paged_cache): a request
holds the blocks its tokens fill, decode attention reads each row's own blocks up to its own length
(runners.engines.kernels.paged_attention); the padding rows are the parking row (`active` = 0: no attention, its K/V
writes land in the parking block, where nothing reads). On a GPU the pool takes what `memory_utilization` of the device leaves after the
weights, the largest prefill's and decode's activations (measured in setup over a two-block pool), as
vLLM's gpu_memory_utilization does; on CPU, or when kv_cache_tokens is given, it holds that many.

When the pool runs out the scheduler preempts the newest request; the engine reads back the tokens it
made (one small device read, only then) so its recompute prefills prompt + those tokens, as vLLM does.
The host pushes changed block-table rows and packs the step's prefill while the decode graph runs, and
waits once per step (the scheduler needs its end time to admit arrivals on time); it times the step
with perf_counter after that synchronize, so a step's time includes the host's own scheduling work, as
a server's would. A step whose only prefill is one whole prompt of up to LONE_LIMIT tokens (the light
load) replays a captured prefill for its length bucket instead, so its TTFT is the GPU's, not the host
issuing twenty operations a layer. Setup compiles and warms every shape a step can take (each decode
bucket, packed prefill, lone prefill), so no measured step compiles.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from runners import cancel
from runners.engines.fast import capture, warm_decode
from runners.engines.fast_model import FastDecoder
from runners.engines.kv_layout import KV_BLOCK_SIZE, cache_len
from runners.engines.lone_prefill import LonePrefill
from runners.engines.paged_cache import PagedState
from runners.engines.ragged import Chunk, pack
from runners.engines.scheduler import Arrivals, BlockPool, Plan, Request, Scheduler
from runners.engines.sources import Scheduled, Source


FINE_STEP = 64  # above this many rows, decode widths go up in steps of this many
LONE_LIMIT = 2048  # the longest whole prompt a step prefills from a captured graph (runners.engines.lone_prefill)


def buckets(max_num_seqs: int) -> list[int]:
    """Decode widths with a graph each: powers of two up to FINE_STEP, then every FINE_STEP rows, and
    max_num_seqs itself; a step pads its decoding rows to the next one (under 2×, and under FINE_STEP
    rows above it)."""
    sizes, b = [], 1
    while b < min(max_num_seqs, FINE_STEP):
        sizes.append(b)
        b *= 2
    sizes += range(FINE_STEP, max_num_seqs, FINE_STEP)
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
    kv_blocks: int  # pool blocks they hold
    preemptions: int  # requests preempted to make room for this step


@dataclass
class RunResult:
    """A whole workload run through the scheduler."""

    requests: list[Request]
    steps: list[StepRecord]
    admission_waits: int
    preemptions: int
    tokens: dict[int, list[int]] = field(default_factory=dict)  # request index → ids, when recorded


OnStep = Callable[[dict[int, int], list[Request], float], None]  # (ids by request index, finished, now)


@dataclass
class Served:
    """What one serve loop did besides its steps: the scheduler's counters."""

    admission_waits: int
    preemptions: int


class ContinuousEngine:
    """Owns the block pool, the block tables and the per-bucket graphs of one max_num_seqs."""

    def __init__(self, decoder: FastDecoder, device: torch.device, graphs: bool | None = None) -> None:
        self.decoder, self.device = decoder, device
        self.graphs = device.type == "cuda" if graphs is None else graphs
        self.state: PagedState | None = None
        self.views: dict[int, PagedState] = {}
        self.captured: dict[int, torch.cuda.CUDAGraph] = {}
        self.table = torch.zeros(0, 0, dtype=torch.int32)  # the host's copy of the block tables
        self.table_rows: dict[int, tuple[int, int]] = {}  # slot → (request index, blocks) the device has
        self.folded: dict[int, list[int]] = {}  # request index → the tokens its recompute prefills
        self.lone: LonePrefill | None = None  # on a GPU: a step whose only prefill is one whole prompt

    def setup(self, max_num_seqs: int, max_seq_len: int, token_budget: int | None = None,
              kv_tokens: int | None = None, memory_utilization: float = 0.9,
              block_size: int = KV_BLOCK_SIZE) -> float:
        """Size and allocate the block pool, compile and warm every shape a step can take (each decode
        bucket captured; a packed prefill of the whole token budget run once, so the allocator holds its
        largest blocks); returns seconds. The pool holds `kv_tokens` when given, every slot at
        `max_seq_len` on CPU, else what `memory_utilization` of the GPU leaves."""
        self.release()
        max_len = cache_len(max_seq_len)
        t0 = time.perf_counter()
        columns = -(-max_len // block_size)
        if kv_tokens is not None or self.device.type != "cuda":
            blocks = 1 + -(-(kv_tokens or max_num_seqs * columns * block_size) // block_size)
        else:
            blocks = self._blocks_from_free_memory(max_num_seqs, max_len, token_budget, memory_utilization,
                                                   block_size)
        self._allocate(max_num_seqs, max_len, blocks, block_size)
        self._warm_prefill(max_num_seqs, max_len, token_budget)
        self._park_all()
        if self.decoder.compiled or self.graphs:
            warm_decode(self.decoder, list(self.views.values()), self.device)
        if self.graphs:
            pool = None
            for width, view in self.views.items():  # buckets never run at once: one memory pool serves all
                self.captured[width] = capture(self.decoder, view, pool)[0]
                pool = self.captured[width].pool()
            self.lone = LonePrefill(self.decoder, self.state, min(max_len, token_budget or max_len, LONE_LIMIT))
        self._park_all()
        self._sync()
        return time.perf_counter() - t0

    def _allocate(self, slots: int, max_len: int, blocks: int, block_size: int) -> None:
        self.state = self.decoder.new_paged_state(slots, max_len, blocks, block_size)
        self.views = {b: self.state.selection(b) for b in buckets(slots)}
        self.table = torch.zeros_like(self.state.table, device="cpu")
        self.sel = torch.zeros(slots, dtype=torch.long)
        if self.device.type == "cuda":
            self.table, self.sel = self.table.pin_memory(), self.sel.pin_memory()

    def _blocks_from_free_memory(self, slots: int, max_len: int, token_budget: int | None, utilization: float,
                                 block_size: int) -> int:
        """Blocks that fit in `utilization` of the device after what is allocated now (the weights) and
        the peak that the largest packed prefill and the widest decode step add, measured over a
        two-block pool (every write of the probe lands in its parking block)."""
        total = torch.cuda.mem_get_info(self.device)[1]
        self._allocate(slots, max_len, 2, block_size)
        self._sync()
        base = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self._warm_prefill(slots, max_len, token_budget)
        self._park_all()
        self.decoder.decode_step(self.views[max(self.views)])
        self._sync()
        activations = torch.cuda.max_memory_allocated(self.device) - base
        self.release()
        in_use = total - torch.cuda.mem_get_info(self.device)[0]
        room = utilization * total - in_use - activations
        per_block = self.decoder.kv_bytes_per_token() * block_size
        if room < 2 * per_block:
            raise RuntimeError(f"no room for a KV pool: {utilization:.0%} of {total / 2**30:.1f} GiB leaves "
                               f"{room / 2**30:.2f} GiB after {in_use / 2**30:.1f} GiB in use and "
                               f"{activations / 2**30:.2f} GiB of activations")
        return int(room // per_block)

    def _warm_prefill(self, slots: int, max_len: int, token_budget: int | None) -> None:
        """Packed prefills of one short and several chunks (a continuation among them) compile the
        prefill's pieces for any token count; one of the whole budget (or every slot full) sizes the
        allocator's blocks. All outside every measured step; the tables are all zero here, so every
        write lands in the parking block."""
        n = min(8, max_len // 2)
        chunks = [Chunk(0, 0, [1] * n), Chunk(0, n, [1] * n, emit=n - 1)]
        chunks += [Chunk(slot, 0, [1] * n, emit=n - 1) for slot in range(1, min(slots, 4))]
        budget = min(token_budget or slots * max_len, slots * max_len)
        full = [Chunk(slot, 0, [1] * min(max_len, budget - slot * max_len), emit=0)
                for slot in range(-(-budget // max_len))]
        for batch in (chunks[:1], chunks, full):
            self.decoder.prefill(pack(batch, self.device), self.state)

    def _park_all(self) -> None:
        for buf in (self.state.pos, self.state.active, self.state.table):
            buf.zero_()

    @property
    def kv_bytes(self) -> int:
        return self.state.kv_bytes if self.state is not None else 0

    @property
    def slots(self) -> int:
        return self.state.parking

    @property
    def max_len(self) -> int:
        return self.state.max_len

    @property
    def block_size(self) -> int:
        return self.state.block_size

    @property
    def pool_blocks(self) -> int:
        """Blocks requests can hold (the parking block is not one of them)."""
        return self.state.blocks - 1

    @property
    def capacity_tokens(self) -> int:
        return self.pool_blocks * self.block_size

    def release(self) -> None:
        self.state, self.views, self.captured, self.lone = None, {}, {}, None
        self.table_rows, self.folded = {}, {}
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @torch.inference_mode()
    def run(self, prompts: list[list[int]], output_lens: list[int], arrivals: dict, token_budget: int,
            record_tokens: bool = False) -> RunResult:
        """Serve every request; `arrivals` is Arrivals' rate= or concurrency= (and seed=) keywords."""
        requests = [Request(i, len(p), o) for i, (p, o) in enumerate(zip(prompts, output_lens))]
        if max(r.kv_need for r in requests) > self.max_len:
            raise ValueError(f"a request of {max(r.kv_need for r in requests)} tokens exceeds the "
                             f"cache length {self.max_len}")
        tokens: dict[int, list[int]] = {r.index: [] for r in requests} if record_tokens else {}

        def record(made: dict[int, int], finished: list[Request], now: float) -> None:
            for index, token in made.items():
                tokens[index].append(token)

        steps, served = self.serve(Scheduled(Arrivals(list(requests), **arrivals)), prompts, token_budget,
                                   record if record_tokens else None)
        return RunResult(requests, steps, served.admission_waits, served.preemptions, tokens)

    @torch.inference_mode()
    def serve(self, source: Source, prompts: Mapping[int, list[int]] | list[list[int]], token_budget: int,
              on_step: OnStep | None = None, t0: float | None = None) -> tuple[list[StepRecord], Served]:
        """Serve requests from `source` until it says none will come and none is left; `prompts[r.index]`
        are a request's ids. `on_step(tokens, finished, now)` hears each step's greedy ids by request
        index (read only when it is given) and the requests it finished. Times count from `t0` (the
        host's perf_counter; now by default). Returns the steps and the scheduler's counters."""
        st = self.state
        self._park_all()
        self.table.zero_()
        self.table_rows, self.folded = {}, {}
        sched = Scheduler(self.slots, token_budget, BlockPool(st.blocks, st.block_size))
        steps: list[StepRecord] = []
        t0, now = (time.perf_counter(), 0.0) if t0 is None else (t0, time.perf_counter() - t0)
        while True:
            cancel.check()
            for r in source.arrived(now):
                sched.add(r)
            plan = sched.plan(now)
            self._fold(plan.preempted)
            if plan.empty:
                if source.wait(t0):
                    now = time.perf_counter() - t0
                    continue
                if sched.idle:
                    return steps, Served(sched.admission_waits, sched.preemptions)
                raise RuntimeError("no request can be admitted and none will arrive (KV pool too small)")
            start = now
            self._push_tables(sched.running)
            rows = self._decode(plan.decodes)  # the graph runs while the host packs the prefill
            emitted = self._prefill(prompts, plan.prefills)
            self._sync()
            now = time.perf_counter() - t0
            made = self._tokens(plan, emitted, rows) if on_step is not None else {}
            finished = sched.commit(plan, now)
            for r in finished:
                st.active[r.slot] = 0
                self.folded.pop(r.index, None)
                source.finished(r, now)
            if on_step is not None:
                on_step(made, finished, now)
            steps.append(StepRecord(start, now, plan.prefill_tokens, len(plan.decodes), rows,
                                    len(sched.running), sched.kv_held(), sched.pool.used, len(plan.preempted)))

    def _fold(self, preempted: list[tuple[Request, int]]) -> None:
        """Park each preempted request's slot and keep the tokens it made, which its recompute prefills
        after its prompt: those of an earlier recompute, then the ones it decoded since (read from the
        slot's history), then the one it was about to feed."""
        for r, slot in preempted:
            kept = self.folded.get(r.index, [])
            if r.folded > len(kept):
                start = r.prompt_len + len(kept)
                fed = self.state.history[slot, start:r.prompt_len + r.folded - 1].tolist()
                self.folded[r.index] = kept + fed + [int(self.state.tokens[slot])]
            self.state.active[slot] = 0

    def _push_tables(self, running: dict[int, Request]) -> None:
        """Copy the block tables to the device when a slot changed hands or a request got a block; the
        host's copy is pinned, and the step's synchronize keeps it from changing under the copy."""
        changed = False
        for slot in [s for s in self.table_rows if s not in running]:
            self.table[slot].zero_()
            del self.table_rows[slot]
            changed = True
        for slot, r in running.items():
            if self.table_rows.get(slot) != (r.index, len(r.blocks)):
                self.table[slot].zero_()
                self.table[slot, :len(r.blocks)] = torch.tensor(r.blocks, dtype=torch.int32)
                self.table_rows[slot] = (r.index, len(r.blocks))
                changed = True
        if changed:
            self.state.table.copy_(self.table, non_blocking=True)

    def _decode(self, rows: list[Request]) -> int:
        """One decode step over the decoding slots, padded to the smallest width with a graph; returns
        the width."""
        if not rows:
            return 0
        width = next(b for b in self.views if b >= len(rows))
        view = self.views[width]
        self.sel[:width] = self.state.parking
        self.sel[:len(rows)] = torch.tensor([r.slot for r in rows])
        view.sel.copy_(self.sel[:width], non_blocking=True)
        if width in self.captured:
            self.captured[width].replay()
        else:
            self.decoder.decode_step(view)
        return width

    def _prefill(self, prompts: Mapping[int, list[int]] | list[list[int]], prefills: list[tuple[Request, int, int]]
                 ) -> tuple[list[int], torch.Tensor] | None:
        """Every chunk of the step in one packed forward; a prefill's last chunk arms its slot for
        decoding. Returns the emitting requests' indices and their logits (read only when recorded)."""
        if not prefills:
            return None
        ids = lambda r: prompts[r.index] + self.folded[r.index] if r.folded else prompts[r.index]
        first, pos, n = prefills[0]
        if len(prefills) == 1 and pos == 0 and n == first.prefill_len and self.lone and n <= self.lone.sizes[-1]:
            return [first.index], self.lone.run(first.slot, ids(first))
        chunks = [Chunk(r.slot, pos, ids(r)[pos:pos + n], emit=n - 1 if pos + n == r.prefill_len else None)
                  for r, pos, n in prefills]
        logits = self.decoder.prefill(pack(chunks, self.device), self.state)
        return [r.index for (r, _, _), c in zip(prefills, chunks) if c.emit is not None], logits

    def _tokens(self, plan: Plan, emitted: tuple[list[int], torch.Tensor] | None, rows: int) -> dict[int, int]:
        """The step's greedy id per request index (tests compare them with the static engine's; the
        server streams them)."""
        fed = self.state.out[:, 0].tolist() if rows else []
        made = {r.index: fed[r.slot] for r in plan.decodes}
        if emitted is not None:
            made.update(zip(emitted[0], emitted[1].argmax(dim=-1).tolist()))
        return made

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
