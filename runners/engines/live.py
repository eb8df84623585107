"""The continuous engine serving live requests: one thread runs its loop for as long as the server lives,
any other thread submits a request and hears each step's tokens as they are made (runners.serving.serve streams
them over HTTP). The loop, scheduler and timing are the in-process engine's own, so a served sweep and an
in-process one differ only by what lies between the client and the engine.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable

from runners.engines.continuous import ContinuousEngine, OnStep
from runners.engines.scheduler import Request


class LiveSource:
    """A request source fed from other threads; the engine's loop blocks in `wait` while it is empty."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self._new: deque[Request] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self.handed: dict[int, float] = {}  # request index → when the engine's loop took it (from t0)

    def submit(self, r: Request) -> None:
        """Queue `r`, arrived now (its arrival is when the server took it, so queueing shows in TTFT)."""
        r.arrival_s = time.perf_counter() - self.t0
        with self._lock:
            self._new.append(r)
            self._wake.set()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.set()

    def arrived(self, now: float) -> list[Request]:
        """The requests submitted by `now` (the loop's clock at this step boundary), each stamped as handed
        to the scheduler then; one submitted since the loop read its clock waits for the next boundary,
        so every stamp of a request follows the one before it."""
        with self._lock:
            out = [r for r in self._new if r.arrival_s <= now]
            self._new = deque(r for r in self._new if r.arrival_s > now)
        for r in out:
            self.handed[r.index] = now
        return out

    def finished(self, r: Request, now: float) -> None:
        """Nothing follows a finished request: live clients send when they like."""

    def wait(self, t0: float) -> bool:
        while True:
            with self._lock:
                if self._new:
                    return True
                if self._closed:
                    return False
                self._wake.clear()
            self._wake.wait()


class LiveEngine:
    """A ContinuousEngine (already set up) serving submitted requests on its own thread."""

    def __init__(self, engine: ContinuousEngine, token_budget: int, listener: OnStep,
                 on_failure: Callable[[BaseException], None]) -> None:
        self.engine, self.token_budget = engine, token_budget
        self.listener, self.on_failure = listener, on_failure
        self.t0 = time.perf_counter()
        self.source = LiveSource(self.t0)
        self.prompts: dict[int, list[int]] = {}
        self.error: BaseException | None = None
        self._index = itertools.count()
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)

    @property
    def max_len(self) -> int:
        """The most KV tokens (prompt + output) one request may hold: a slot's length."""
        return self.engine.max_len

    def start(self) -> LiveEngine:
        self._thread.start()
        return self

    def submit(self, prompt: list[int], output_len: int) -> Request:
        """A request for `output_len` forced tokens; ValueError when it cannot fit a slot."""
        if self.error is not None:
            raise RuntimeError(f"the engine has stopped: {self.error}")
        if len(prompt) + output_len > self.max_len:
            raise ValueError(f"prompt ({len(prompt)} tokens) + max_tokens ({output_len}) exceeds this server's "
                             f"max model length {self.max_len}")
        r = Request(next(self._index), len(prompt), output_len)
        self.prompts[r.index] = prompt
        self.source.submit(r)
        return r

    def forget(self, r: Request) -> None:
        """Drop what `stamps` keeps of a request its server has answered."""
        self.source.handed.pop(r.index, None)

    def close(self) -> None:
        self.source.close()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        try:
            self.engine.serve(self.source, self.prompts, self.token_budget, self._step, t0=self.t0)
        except BaseException as err:  # the server answers every waiting and later request with it
            self.error = err
            self.on_failure(err)

    def _step(self, made: dict[int, int], finished: list[Request], now: float) -> None:
        for r in finished:
            del self.prompts[r.index]
        self.listener(made, finished, now)

    def stamps(self, r: Request) -> dict[str, float | None]:
        """A request's engine-side times on the host's perf_counter clock: handed to the scheduler, given
        a slot (admitted), and its first token's step end; None where it has not got that far."""
        def clock(t: float | None) -> float | None:
            return None if t is None else self.t0 + t
        handed = self.source.handed.get(r.index)
        return {"submitted": clock(r.arrival_s), "handed": clock(handed), "admitted": clock(r.admit_s),
                "first_token": clock(r.token_s[0] if r.token_s else None)}
