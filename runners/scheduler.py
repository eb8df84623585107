"""Continuous-batching scheduler: arrivals, a FIFO waiting queue, and per-step plans (docs/design.md §2).

Pure Python so its rules are unit-tested without a model. Each step the running rows decode one token
each; what is left of the token budget goes to prefill chunks, first of requests already admitted,
then of newly admitted ones. A request is admitted when a slot is free, the budget has room and the
KV cache can hold its whole prompt + output; it leaves its slot the step its last token is made.
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

    @property
    def kv_need(self) -> int:
        return self.prompt_len + self.output_len

    @property
    def generated(self) -> int:
        return len(self.token_s)

    @property
    def kv_held(self) -> int:
        """Tokens in the cache: the prompt so far, plus every generated token fed back (all but the last)."""
        return self.prefilled + max(self.generated - 1, 0)

    @property
    def done(self) -> bool:
        return self.generated == self.output_len


class Arrivals:
    """When requests arrive: Poisson (open loop, seeded gaps) or N closed-loop clients.

    A closed-loop client sends its next request at the moment its previous one finishes.
    """

    def __init__(self, requests: list[Request], rate: float | None = None, concurrency: int | None = None,
                 seed: int = 0) -> None:
        if (rate is None) == (concurrency is None):
            raise ValueError("give exactly one of rate and concurrency")
        self.pending = deque(requests)
        self.due: list[tuple[float, int, Request]] = []
        if rate is not None:
            rng, t = random.Random(f"arrivals:{seed}"), 0.0
            for r in self.pending:
                t += rng.expovariate(rate)
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
            self._send(r.client, t)


@dataclass
class Plan:
    """One engine step: prefill chunks (request, first position, tokens) and the rows that decode."""

    prefills: list[tuple[Request, int, int]]
    decodes: list[Request]

    @property
    def empty(self) -> bool:
        return not self.prefills and not self.decodes

    @property
    def prefill_tokens(self) -> int:
        return sum(n for _, _, n in self.prefills)


class Scheduler:
    """Admission and step planning over `slots` rows of a static KV cache."""

    def __init__(self, slots: int, token_budget: int, kv_capacity: int) -> None:
        if token_budget < slots:
            raise ValueError(f"token budget {token_budget} is below the slot count {slots}")
        self.token_budget, self.kv_capacity = token_budget, kv_capacity
        self.free = list(range(slots))  # a heap: the lowest free slot first keeps the decode prefix short
        self.waiting: deque[Request] = deque()
        self.running: dict[int, Request] = {}
        self.kv_reserved = 0
        self.admission_waits = 0  # steps in which the queue's head waited only for KV capacity

    def add(self, r: Request) -> None:
        self.waiting.append(r)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def kv_held(self) -> int:
        return sum(r.kv_held for r in self.running.values())

    def plan(self, now: float) -> Plan:
        """Decode every prefilled row, continue partial prefills, then admit from the queue's head."""
        running = sorted(self.running.values(), key=lambda r: (r.admit_s, r.index))
        decodes = [r for r in running if r.prefilled == r.prompt_len]
        budget = self.token_budget - len(decodes)
        prefills = []
        for r in running:
            if r.prefilled < r.prompt_len and budget > 0:
                n = min(r.prompt_len - r.prefilled, budget)
                prefills.append((r, r.prefilled, n))
                budget -= n
        while self.waiting and self.free and budget > 0:
            r = self.waiting[0]
            if self.kv_reserved + r.kv_need > self.kv_capacity:
                self.admission_waits += 1
                break
            self.waiting.popleft()
            r.slot, r.admit_s = heapq.heappop(self.free), now
            self.running[r.slot] = r
            self.kv_reserved += r.kv_need
            n = min(r.prompt_len, budget)
            prefills.append((r, 0, n))
            budget -= n
        return Plan(prefills, decodes)

    def commit(self, plan: Plan, t_end: float) -> list[Request]:
        """Apply a finished step: count prefilled tokens, stamp new tokens, free finished slots."""
        for r, _, n in plan.prefills:
            r.prefilled += n
            if r.prefilled == r.prompt_len:
                r.token_s.append(t_end)  # the prefill's last logits give the first token
        for r in plan.decodes:
            r.token_s.append(t_end)
        finished = [r for r in self.running.values() if r.done]
        for r in finished:
            del self.running[r.slot]
            heapq.heappush(self.free, r.slot)
            self.kv_reserved -= r.kv_need
        return finished
