"""The endpoint engine's client: a workload sent to an OpenAI-compatible server, each request streamed and
its chunks timed on arrival (docs/design.md §3). Arrivals follow runners.engines.scheduler.Arrivals, the in-process
engine's own: the same seeded Poisson gaps, or clients that send their next request when the last ends.

Requests are made as the server's Capabilities allow (runners.engines.negotiate finds them in setup): the
completions or chat API, token ids or text, the output length forced by `ignore_eos`, `min_tokens` or not
at all, usage asked for in the stream or not, the stream ending at [DONE] or when the connection closes.

Every request ends as an Outcome: tokens and their times, or the kind of failure (connection refused,
HTTP status, timeout, truncated stream, an error inside the stream). Failures are results, never raised:
the mode counts them per point.
"""
from __future__ import annotations

import asyncio
import errno
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from runners import cancel
from runners.engines.scheduler import Arrivals, Request
from runners.engines.sse import CompletionStream

CHECK_S = 0.1  # the dispatcher looks for a cancel at least this often
CLOCK_PROBES = 5  # reads of the server's clock before a repeat; the quickest round trip sets the offset
JSON_TYPE = {"Content-Type": "application/json"}
CLOCK_HEADER = "X-Server-Clock"  # runners.serving.serve's perf_counter, on its /v1/models answer
# runners.serving.serve's server_timing, in the order they happen to a request
# (runners.serving.serve's doc says what each is)
SERVER_STAMPS = ("received", "submitted", "handed", "admitted", "first_token", "first_flush")
DETAIL_CHARS = 200
API_PATHS = {"completions": "/completions", "chat": "/chat/completions"}
LENGTH_TEXT = {"ignore_eos": "forced by ignore_eos", "min_tokens": "forced by min_tokens", "none": "not forced"}


class Unreachable(RuntimeError):
    """The server did not answer a question the sweep asks outside the measured requests."""


@dataclass(frozen=True)
class Capabilities:
    """How requests are made to one server, as negotiated in setup (env.json's `endpoint`, the fingerprint)."""

    api: str  # completions | chat
    prompt: str  # ids | text (chat: always text)
    length: str  # ignore_eos | min_tokens | none: how each request's output is held to its drawn length
    stream_options: bool  # stream_options.include_usage is sent (the server did not refuse it)
    usage: str  # server (usage came in the stream) | chunks (tokens counted from the chunks)
    end: str  # [DONE] | end of stream (the server closes the stream after its last chunk, no [DONE])
    prompt_tokens_added: int | None = None  # the server's prompt count minus the words or ids sent, in the
    # probe (a chat template's tokens, a BOS); None when the server gave no usage

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line for the fingerprint and the log."""
        added = ("" if self.prompt_tokens_added is None else
                 f", the server counts {self.prompt_tokens_added:+d} prompt tokens over those sent")
        usage = "from the stream" if self.usage == "server" else "counted from chunks"
        return (f"{self.api} API, prompts as {'token ids' if self.prompt == 'ids' else 'text'}, output lengths "
                f"{LENGTH_TEXT[self.length]}, usage {usage}, streams end at {self.end}{added}")


def request_body(caps: Capabilities, model: str, prompt: list[int] | str, max_tokens: int, stream: bool,
                 user: str | None = None) -> dict[str, Any]:
    """A greedy request as `caps` allow: the prompt, or one user message of its words; the length forced
    where the server takes a way to; usage asked for where it takes stream_options."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": 0.0, "stream": stream}
    if caps.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if caps.length == "ignore_eos":
        body["ignore_eos"] = True
    elif caps.length == "min_tokens":
        body["min_tokens"] = max_tokens
    if stream and caps.stream_options:
        body["stream_options"] = {"include_usage": True}
    if user is not None:
        body["user"] = user
    return body


@dataclass
class Outcome:
    """One request as the client saw it; times in seconds from the repeat's start."""

    index: int
    arrival_s: float  # when it was due (a closed loop's client sends it the moment its last one ended)
    sent_s: float
    end_s: float = 0.0  # the stream's last byte, or the failure
    chunk_s: list[float] = field(default_factory=list)  # arrival of each token-carrying chunk
    prompt_tokens: int | None = None  # as the server counted them (usage), None when it did not say
    completion_tokens: int | None = None
    error: str | None = None  # the kind of failure: "connection refused", "HTTP 503", "timeout", ...
    detail: str = ""  # its text, for the point's message
    server: dict[str, float] = field(default_factory=dict)  # the server's own times (SERVER_STAMPS) where it
    # sent them, moved onto this repeat's clock by the measured offset


@dataclass(frozen=True)
class Clock:
    """The server's clock against this process's perf_counter: server − client, within ± error (half the
    round trip of the quickest of CLOCK_PROBES reads)."""

    offset_s: float
    error_s: float


@dataclass
class Served:
    """A workload sent through the server: every request's outcome, and the repeat's start on the host clock."""

    outcomes: list[Outcome]
    start: float  # perf_counter seconds
    clock: Clock | None = None  # None: the server tells no clock (it is not `runners serve`)

    @property
    def end_s(self) -> float:
        return max(o.end_s for o in self.outcomes)


class EndpointClient:
    """Talks to one server's OpenAI-compatible API (`url` is its base, e.g. http://127.0.0.1:8000/v1)."""

    def __init__(self, url: str, model: str, api_key: str | None, request_timeout_s: float) -> None:
        self.url, self.model = url.rstrip("/"), model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self.caps: Capabilities | None = None  # set once negotiated; every measured request follows it

    def models(self, timeout_s: float = 10.0) -> list[str]:
        """The model ids the server lists (at least one), or Unreachable."""
        async def get() -> list[str]:
            async with aiohttp.ClientSession(headers=self.headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as s:
                async with s.get(f"{self.url}/models") as response:
                    if response.status >= 400:
                        raise Unreachable(f"HTTP {response.status}: {await _message(response)}")
                    return [m["id"] for m in (await response.json(content_type=None))["data"]]

        try:
            listed = asyncio.run(get())
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as err:
            raise Unreachable(f"cannot reach {self.url}/models: {type(err).__name__}: {err}") from None
        except (ValueError, KeyError, TypeError) as err:
            raise Unreachable(f"{self.url}/models is not an OpenAI model list: {type(err).__name__}: {err}") from None
        if not listed:
            raise Unreachable(f"{self.url}/models lists no model")
        return listed

    def ready(self) -> bool:
        """True once the server lists a model."""
        try:
            return bool(self.models(timeout_s=5.0))
        except Unreachable:
            return False

    def probe(self, caps: Capabilities, prompt: list[int] | str,
              max_tokens: int = 2) -> tuple[str | None, CompletionStream]:
        """One small streamed request made as `caps` say: (None, its parsed stream) when the server took it,
        else (why not, an empty stream)."""
        async def post() -> tuple[str | None, CompletionStream]:
            parsed = CompletionStream(chat=caps.api == "chat")
            async with aiohttp.ClientSession(headers=self.headers, timeout=self.timeout) as s:
                body = request_body(caps, self.model, prompt, max_tokens, True)
                async with s.post(self.url + API_PATHS[caps.api], json=body) as response:
                    if response.status >= 400:
                        return f"HTTP {response.status}: {await _message(response)}", parsed
                    async for raw in response.content.iter_any():
                        parsed.feed(raw, 0.0)
                    return None, parsed

        try:
            return asyncio.run(post())
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as err:
            raise Unreachable(f"cannot reach {self.url}{API_PATHS[caps.api]}: {type(err).__name__}: {err}") from None

    def run(self, prompts: list[Any], output_lens: list[int], arrivals: dict, tag: str) -> Served:
        """Send every request as `arrivals` (Arrivals' rate= or concurrency=, and seed=) schedule them;
        `tag` names them in the `user` field (tag/index), so a server's own log can be matched."""
        return asyncio.run(self._run(prompts, output_lens, arrivals, tag))

    async def _run(self, prompts: list[Any], output_lens: list[int], arrivals: dict, tag: str) -> Served:
        """Each request is sent from the done-callback of the one that frees its client (a closed loop) or
        by the dispatcher when due (Poisson): no hop through a loop that looks at every request in flight."""
        requests = [Request(i, 0, n) for i, n in enumerate(output_lens)]
        bodies = [json.dumps(request_body(self.caps, self.model, prompts[r.index], r.output_len, True,
                                          f"{tag}/{r.index}")).encode() for r in requests]
        source = Arrivals(list(requests), **arrivals)
        outcomes: list[Outcome] = []
        failures: list[BaseException] = []
        in_flight: set[asyncio.Task] = set()  # the loop keeps only weak references to tasks: these hold them
        wake = asyncio.Event()
        connector = aiohttp.TCPConnector(limit=0)  # the load, not a pool size, sets how many are in flight
        async with aiohttp.ClientSession(connector=connector, headers=self.headers, timeout=self.timeout) as session:
            clock = await self._clock(session)
            await self._connect(session, min(arrivals.get("concurrency") or 0, len(requests)))
            start = time.perf_counter()

            def send() -> None:
                for r in source.arrived(time.perf_counter() - start):
                    task = asyncio.create_task(self._one(session, r, bodies[r.index], start, clock))
                    in_flight.add(task)
                    task.add_done_callback(lambda t, r=r: done(t, r))

            def done(task: asyncio.Task, r: Request) -> None:
                in_flight.discard(task)
                if task.cancelled():
                    return
                if task.exception() is not None:
                    failures.append(task.exception())
                else:
                    outcomes.append(task.result())
                    source.finished(r, outcomes[-1].end_s)
                    send()
                wake.set()

            while len(outcomes) < len(requests) and not failures:
                cancel.check()
                wake.clear()  # before sending: a request that ends from here on wakes the loop
                send()
                due = source.next_time()
                wait = CHECK_S if due is None else min(CHECK_S, max(0.0, due - (time.perf_counter() - start)))
                try:
                    await asyncio.wait_for(wake.wait(), wait)
                except asyncio.TimeoutError:
                    pass
            if failures:
                raise failures[0]
        return Served(sorted(outcomes, key=lambda o: o.index), start, clock)

    async def _connect(self, session: aiohttp.ClientSession, clients: int) -> None:
        """Open one kept-alive connection per closed-loop client before the repeat starts, so the first
        requests' TTFT holds no TCP handshake (later ones reuse their connection anyway)."""
        async def one() -> None:
            async with session.get(f"{self.url}/models") as response:
                await response.read()

        try:
            await asyncio.gather(*(one() for _ in range(clients)))
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
            pass  # the measured requests will say what is wrong

    async def _clock(self, session: aiohttp.ClientSession) -> Clock | None:
        """The server's clock offset, from CLOCK_PROBES reads of /v1/models (NTP's estimate: the server read
        its clock halfway through the round trip); None when the server does not send its clock."""
        reads = []
        for _ in range(CLOCK_PROBES):
            sent = time.perf_counter()
            try:
                async with session.get(f"{self.url}/models") as response:
                    await response.read()
                    told = response.headers.get(CLOCK_HEADER)
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
                return None  # the measured requests will say what is wrong
            got = time.perf_counter()
            if told is None:
                return None
            reads.append((got - sent, float(told) - (sent + got) / 2))
        trip, offset = min(reads)
        return Clock(offset, trip / 2)

    async def _one(self, session: aiohttp.ClientSession, r: Request, body: bytes, start: float,
                   clock: Clock | None) -> Outcome:
        """One request, its `body` already JSON (encoded before the repeat started, outside its times)."""
        caps = self.caps
        out = Outcome(r.index, r.arrival_s, time.perf_counter() - start)
        stream = CompletionStream(chat=caps.api == "chat")
        streaming = False  # the server answered 2xx: a connection lost from here on cut a stream short
        try:
            async with session.post(self.url + API_PATHS[caps.api], data=body, headers=JSON_TYPE) as response:
                if response.status >= 400:
                    out.error, out.detail = f"HTTP {response.status}", await _message(response)
                else:
                    streaming = True
                    async for raw in response.content.iter_any():
                        stream.feed(raw, time.perf_counter() - start)
                    out.error, out.detail = stream.failure(caps.end == "[DONE]"), stream.error or ""
        except aiohttp.ClientConnectorError as err:
            refused = err.os_error is not None and err.os_error.errno == errno.ECONNREFUSED
            out.error, out.detail = "connection refused" if refused else "cannot connect", str(err)
        except asyncio.TimeoutError:
            out.error, out.detail = "timeout", f"no complete answer within {self.timeout.total:g} s"
        except (aiohttp.ClientError, OSError) as err:  # reset, disconnected, a payload cut short
            out.error = "truncated stream" if streaming else "connection lost"
            out.detail = f"{type(err).__name__}: {err}"
        out.end_s = time.perf_counter() - start
        out.chunk_s = stream.chunk_s
        out.prompt_tokens, out.completion_tokens = stream.count("prompt_tokens"), stream.count("completion_tokens")
        told = stream.server_timing or {}
        if clock is not None and all(isinstance(told.get(k), (int, float)) for k in SERVER_STAMPS):
            out.server = {k: told[k] - clock.offset_s - start for k in SERVER_STAMPS}
        out.detail = out.detail[:DETAIL_CHARS]
        return out


async def _message(response: aiohttp.ClientResponse) -> str:
    """An error response's message (OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, or the body's
    first line)."""
    text = await response.text()
    try:
        body = await response.json(content_type=None)
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:DETAIL_CHARS]
        for key in ("message", "detail"):
            if isinstance(body, dict) and body.get(key):
                return str(body[key])[:DETAIL_CHARS]
    except ValueError:
        pass
    return (text.strip().splitlines() or [""])[0][:DETAIL_CHARS]
