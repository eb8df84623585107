"""Continuous-batching scheduler: arrivals, a FIFO waiting queue, a pool of KV blocks and per-step plans
(docs/design.md §2).

Pure Python so its rules are unit-tested without a model. Each step the running rows decode one token
each; what is left of the token budget goes to prefill chunks, first of requests already admitted,
then of newly admitted ones. The KV cache is a pool of fixed-size blocks handed out as a request's
tokens need them (vLLM's paged attention): a request is admitted when a slot is free, the budget has
room and the pool holds its first chunk; when a running request needs a block and none is free, the
newest running request is preempted (its blocks freed, its prompt and the tokens it made so far
recomputed when it is admitted again, the way vLLM recomputes) and counted. A request leaves its slot
the step its last token is made.
"""
from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field


@dataclass
class Request:
    """One request's lengths and life; times are seconds from the repeat's start."""

    index: int
    prompt_len: int
    output_len: int
    client: int | None = None  # closed loop: the client that sends it
    arrival_s: float | None = None
    admit_s: float | None = None
    token_s: list[float] = field(default_factory=list)
    slot: int | None = None
    prefilled: int = 0
    folded: int = 0  # generated tokens a recompute after preemption prefills with the prompt
    blocks: list[int] = field(default_factory=list)  # the pool blocks holding its positions 0, 1, … in order
    preemptions: int = 0

    @property
    def kv_need(self) -> int:
        return self.prompt_len + self.output_len

    @property
    def generated(self) -> int:
        return len(self.token_s)

    @property
    def prefill_len(self) -> int:
        """Tokens its prefill runs: the prompt, and after a preemption the tokens it had made too."""
        return self.prompt_len + self.folded

    @property
    def kv_held(self) -> int:
        """Tokens in the cache: the prefill so far, plus every generated token fed back since (all but the last)."""
        return self.prefilled + max(self.generated - 1 - self.folded, 0)

    @property
    def done(self) -> bool:
        return self.generated == self.output_len


def poisson_arrival_s(count: int, rate: float, seed: int) -> list[float]:
    """`count` open-loop arrival times in seconds (exponential gaps at `rate` requests/s, seeded): the scheduler's,
    and the host's when the open-loop model predicts a draw it never runs (runners.metrics.open_loop)."""
    rng, t, times = random.Random(f"arrivals:{seed}"), 0.0, []
    for _ in range(count):
        t += rng.expovariate(rate)
        times.append(t)
    return times


class Arrivals:
    """When requests arrive: Poisson (open loop, seeded gaps) or N closed-loop clients.

    A closed-loop client sends its next request `think_s` after its previous one finishes (0: at that moment).
    In-process that moment is a step's end, so with no think time every next request meets a step boundary; a
    network client's turnaround lands it inside the next step instead, and a think time of that turnaround
    gives the in-process engine the same arrival phase (docs/design.md §2).
    """

    def __init__(self, requests: list[Request], rate: float | None = None, concurrency: int | None = None,
                 seed: int = 0, think_s: float = 0.0) -> None:
        if (rate is None) == (concurrency is None):
            raise ValueError("give exactly one of rate and concurrency")
        if think_s < 0 or (think_s and rate is not None):
            raise ValueError(f"a think time is a closed-loop client's wait, at least 0 s: got {think_s!r}"
                             + (" with an arrival rate" if rate is not None else ""))
        self.think_s = think_s
        self.pending = deque(requests)
        self.due: list[tuple[float, int, Request]] = []
        if rate is not None:
            for t, r in zip(poisson_arrival_s(len(self.pending), rate, seed), self.pending):
                self.due.append((t, r.index, r))
            self.pending.clear()
        else:
            for client in range(concurrency):
                self._send(client, 0.0)

    def _send(self, client: int, t: float) -> None:
        if self.pending:
            r = self.pending.popleft()
            r.client = client
            heapq.heappush(self.due, (t, r.index, r))

    def arrived(self, now: float) -> list[Request]:
        """Requests whose arrival time is at most `now`, in arrival order, stamped with it."""
        out = []
        while self.due and self.due[0][0] <= now:
            t, _, r = heapq.heappop(self.due)
            r.arrival_s = t
            out.append(r)
        return out

    def next_time(self) -> float | None:
        return self.due[0][0] if self.due else None

    def finished(self, r: Request, t: float) -> None:
        if r.client is not None:
            self._send(r.client, t + self.think_s)


@dataclass
class Plan:
    """One engine step: prefill chunks (request, first position, tokens), the rows that decode, and the
    requests preempted to make room (with the slot each held), whose tokens the engine reads back."""

    prefills: list[tuple[Request, int, int]]
    decodes: list[Request]
    preempted: list[tuple[Request, int]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.prefills and not self.decodes

    @property
    def prefill_tokens(self) -> int:
        return sum(n for _, _, n in self.prefills)


class BlockPool:
    """Free KV blocks of `block_size` tokens. Block 0 is never handed out: parked rows of a decode step
    (free slots, unfinished prefills) write there, where nothing reads."""

    def __init__(self, blocks: int, block_size: int) -> None:
        if blocks < 2:
            raise ValueError(f"a KV pool needs at least 2 blocks (one is the parking block), not {blocks}")
        self.block_size = block_size
        self.total = blocks - 1
        self.free = list(range(blocks - 1, 0, -1))  # a stack: pop gives the lowest block first
        self.peak = 0

    @property
    def used(self) -> int:
        return self.total - len(self.free)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def grow(self, r: Request, tokens: int) -> bool:
        """Give `r` blocks until they hold `tokens` tokens; False (and nothing given) when too few are free."""
        more = self.blocks_for(tokens) - len(r.blocks)
        if more > len(self.free):
            return False
        r.blocks.extend(self.free.pop() for _ in range(more))
        self.peak = max(self.peak, self.used)
        return True

    def release(self, r: Request) -> None:
        self.free.extend(reversed(r.blocks))
        r.blocks = []


class Scheduler:
    """Admission, preemption and step planning over `slots` rows and a pool of KV blocks."""

    def __init__(self, slots: int, token_budget: int, pool: BlockPool) -> None:
        if token_budget < slots:
            raise ValueError(f"token budget {token_budget} is below the slot count {slots}")
        self.token_budget, self.pool = token_budget, pool
        self.free = list(range(slots))  # a heap: the lowest free slot first keeps the decode prefix short
        self.waiting: deque[Request] = deque()
        self.running: dict[int, Request] = {}
        self.admission_waits = 0  # steps in which the queue's head waited only for KV blocks
        self.preemptions = 0

    def add(self, r: Request) -> None:
        if r.kv_need > self.pool.total * self.pool.block_size:
            raise ValueError(f"request {r.index} needs {r.kv_need} KV tokens; the pool holds "
                             f"{self.pool.total * self.pool.block_size}")
        self.waiting.append(r)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def kv_held(self) -> int:
        return sum(r.kv_held for r in self.running.values())

    def plan(self, now: float) -> Plan:
        """Blocks for every decoding row's next token (preempting the newest when the pool is empty), then
        partial prefills, then admissions from the queue's head, each chunk as far as budget and blocks go."""
        preempted: list[tuple[Request, int]] = []
        running = self._by_age()
        room = self.pool.block_size
        for r in running:  # the host's work per step: the common case (room in the last block) stays cheap
            if r.slot is not None and r.prefilled == r.prefill_len and r.kv_held >= len(r.blocks) * room:
                while r.slot is not None and not self.pool.grow(r, r.kv_held + 1):
                    preempted.append(self._preempt(self._by_age()[-1]))
        if preempted:
            running = self._by_age()
        decodes = [r for r in running if r.prefilled == r.prefill_len]
        budget = self.token_budget - len(decodes)
        prefills = []
        for r in running:
            n = self._chunk(r, budget) if r.prefilled < r.prefill_len else 0
            if n:
                prefills.append((r, r.prefilled, n))
                budget -= n
        while self.waiting and self.free and budget > 0:
            r = self.waiting[0]
            n = min(r.prefill_len, budget)
            if self.pool.blocks_for(n) + self.watermark > len(self.pool.free):
                self.admission_waits += 1
                break
            self.waiting.popleft()
            self.pool.grow(r, n)
            r.slot, r.admit_s = heapq.heappop(self.free), now if r.admit_s is None else r.admit_s
            self.running[r.slot] = r
            prefills.append((r, 0, n))
            budget -= n
        if not decodes and not prefills and self.running:  # unfinished prefills hold every block
            preempted.append(self._preempt(running[-1]))
            later = self.plan(now)
            return Plan(later.prefills, later.decodes, preempted + later.preempted)
        return Plan(prefills, decodes, preempted)

    @property
    def watermark(self) -> int:
        """Blocks an admission leaves free, so the running rows' next tokens rarely force a preemption
        (vLLM keeps 1 % of the pool the same way)."""
        return max(1, self.pool.total // 100) if self.running else 0

    def _by_age(self) -> list[Request]:
        """Running requests, first admitted first: the last is the one preemption takes."""
        return sorted(self.running.values(), key=lambda r: (r.admit_s, r.index))

    def _chunk(self, r: Request, budget: int) -> int:
        """How many of a running r's remaining prefill tokens this step runs: up to the budget and the
        free blocks."""
        n = min(r.prefill_len - r.prefilled, budget)
        fits = (len(r.blocks) + len(self.pool.free)) * self.pool.block_size - r.prefilled
        n = max(min(n, fits), 0)
        if n:
            self.pool.grow(r, r.prefilled + n)
        return n

    def _preempt(self, r: Request) -> tuple[Request, int]:
        """Free r's blocks and slot; it waits at the queue's head to recompute what it had."""
        slot = r.slot
        self.pool.release(r)
        del self.running[slot]
        heapq.heappush(self.free, slot)
        r.slot, r.prefilled, r.folded = None, 0, r.generated
        r.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(r)
        return r, slot

    def commit(self, plan: Plan, t_end: float) -> list[Request]:
        """Apply a finished step: count prefilled tokens, stamp new tokens, free finished slots and blocks."""
        for r, _, n in plan.prefills:
            r.prefilled += n
            if r.prefilled == r.prefill_len:
                r.token_s.append(t_end)  # the prefill's last logits give the next token
        for r in plan.decodes:
            r.token_s.append(t_end)
        finished = [r for r in self.running.values() if r.done]
        for r in finished:
            del self.running[r.slot]
            heapq.heappush(self.free, r.slot)
            self.pool.release(r)
        return finished
