"""`python -m runners serve`: an OpenAI-compatible streaming server over BatchScope's continuous engine.

One model, `POST /v1/completions` (streamed or not) and `GET /v1/models`, so the `endpoint` engine has a
real server to measure on any machine, and a served sweep can be set beside an in-process one of the same
engine. Prompts are token ids (a list of ints); text needs a local checkpoint with a tokenizer. Outputs
are greedy and forced to `max_tokens` (no early end), as in every BatchScope sweep; sampling options are
accepted and ignored. A preset has no tokenizer, so a streamed token's text is its id (" 1234").

`--api-key-env NAME` makes every request carry `Authorization: Bearer <the variable's value>` (vLLM's
`--api-key`, with the key kept out of the command line). `--timings FILE` appends one JSON line per finished request with the engine's own times (perf_counter
seconds, CLOCK_MONOTONIC: one clock for every process of a Linux host) and the request's `user` field,
so a client on the same host can subtract them from what it saw: that difference is the HTTP overhead.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from aiohttp import web

from runners import devices, models
from runners.engines.continuous import ContinuousEngine
from runners.engines.fast import FastEngine
from runners.engines.live import LiveEngine
from runners.scheduler import Request
from runners.spec import model_context

STOP = object()  # the end of a request's tokens on its queue


class BadRequest(Exception):
    """A request the server refuses: `status` and an OpenAI-style error body."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


def error_response(err: BadRequest) -> web.Response:
    return web.json_response({"error": {"message": str(err), "type": err.kind, "param": None, "code": err.status}},
                             status=err.status)


def sse(payload: Any) -> bytes:
    """One server-sent event carrying `payload` as JSON (or the literal [DONE])."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class Completions:
    """The HTTP side: parses requests, hands them to the live engine, streams each step's tokens back."""

    def __init__(self, name: str, vocab: int, tokenizer: Any | None, timings: TextIO | None) -> None:
        self.name, self.vocab, self.tokenizer, self.timings = name, vocab, tokenizer, timings
        self.live: LiveEngine | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.streams: dict[int, asyncio.Queue] = {}
        self.created = int(time.time())

    # engine thread → event loop: one hop per step, whatever the number of requests it served
    def on_step(self, made: dict[int, int], finished: list[Request], now: float) -> None:
        self.loop.call_soon_threadsafe(self._deliver, made, [r.index for r in finished])

    def on_failure(self, err: BaseException) -> None:
        self.loop.call_soon_threadsafe(self._fail, err)

    def _deliver(self, made: dict[int, int], finished: list[int]) -> None:
        for index, token in made.items():
            if index in self.streams:
                self.streams[index].put_nowait(token)
        for index in finished:
            if index in self.streams:
                self.streams[index].put_nowait(STOP)

    def _fail(self, err: BaseException) -> None:
        for queue in self.streams.values():
            queue.put_nowait(err)

    async def models(self, request: web.Request) -> web.Response:
        card = {"id": self.name, "object": "model", "created": self.created, "owned_by": "batchscope",
                "max_model_len": self.live.max_len}
        return web.json_response({"object": "list", "data": [card]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        received = time.perf_counter()
        try:
            body = await request.json()
            prompt, max_tokens, stream, usage = self.parse(body)
            r = self.live.submit(prompt, max_tokens)
        except json.JSONDecodeError:
            return error_response(BadRequest("the body is not JSON"))
        except BadRequest as err:
            return error_response(err)
        except ValueError as err:
            return error_response(BadRequest(str(err)))
        except RuntimeError as err:
            return error_response(BadRequest(str(err), 503, "server_error"))
        queue: asyncio.Queue = asyncio.Queue()
        self.streams[r.index] = queue
        try:
            if stream:
                return await self._stream(request, r, queue, usage)
            return await self._whole(r, queue)
        finally:
            del self.streams[r.index]
            self._log(body.get("user"), received, r)

    def parse(self, body: Any) -> tuple[list[int], int, bool, bool]:
        """(prompt ids, max_tokens, stream, include usage) of a completions body, or BadRequest."""
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        if body.get("model") not in (None, self.name):
            raise BadRequest(f"The model `{body.get('model')}` does not exist.", 404, "NotFoundError")
        if body.get("n", 1) != 1:
            raise BadRequest("n must be 1: this server makes one completion per request")
        max_tokens = body.get("max_tokens", 16)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise BadRequest(f"max_tokens must be a whole number ≥ 1, got {max_tokens!r}")
        stream = bool(body.get("stream", False))
        usage = not stream or bool((body.get("stream_options") or {}).get("include_usage"))
        return self.prompt_ids(body.get("prompt")), max_tokens, stream, usage

    def prompt_ids(self, prompt: Any) -> list[int]:
        """Token ids as sent, or text through the checkpoint's tokenizer; one prompt per request."""
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise BadRequest("this server takes token ids only (its model has no tokenizer): send the "
                                 "prompt as a list of ints")
            ids = self.tokenizer.encode(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = prompt
        else:
            raise BadRequest("prompt must be one non-empty list of token ids or one string")
        if not ids or not all(0 <= t < self.vocab for t in ids):
            raise BadRequest(f"prompt token ids must lie in [0, {self.vocab})")
        return ids

    def text(self, token: int) -> str:
        return self.tokenizer.decode([token]) if self.tokenizer is not None else f" {token}"

    def chunk(self, r: Request, text: str | None, finish: str | None) -> dict[str, Any]:
        choices = [] if text is None else [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]
        return {"id": f"cmpl-{r.index}", "object": "text_completion", "created": self.created, "model": self.name,
                "choices": choices}

    @staticmethod
    def usage(r: Request, made: int) -> dict[str, int]:
        return {"prompt_tokens": r.prompt_len, "completion_tokens": made, "total_tokens": r.prompt_len + made}

    async def _stream(self, request: web.Request, r: Request, queue: asyncio.Queue, usage: bool) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        made = 0
        while (item := await queue.get()) is not STOP:
            if isinstance(item, BaseException):  # the engine died: say so inside the stream, no [DONE]
                await response.write(sse({"error": {"message": f"engine failed: {item}", "type": "server_error"}}))
                return response
            made += 1
            await response.write(sse(self.chunk(r, self.text(item), "length" if made == r.output_len else None)))
        if usage:
            await response.write(sse({**self.chunk(r, None, None), "usage": self.usage(r, made)}))
        await response.write(sse("[DONE]"))
        await response.write_eof()
        return response

    async def _whole(self, r: Request, queue: asyncio.Queue) -> web.Response:
        tokens = []
        while (item := await queue.get()) is not STOP:
            if isinstance(item, BaseException):
                return error_response(BadRequest(f"engine failed: {item}", 500, "server_error"))
            tokens.append(item)
        body = self.chunk(r, "".join(self.text(t) for t in tokens), "length")
        return web.json_response({**body, "usage": self.usage(r, len(tokens))})

    def _log(self, user: Any, received: float, r: Request) -> None:
        """The engine's own times of a finished request, for the HTTP overhead (see the module's doc)."""
        if self.timings is None or len(r.token_s) != r.output_len:
            return
        t0 = self.live.t0
        self.timings.write(json.dumps({"user": user, "received": received, "tokens": [t0 + t for t in r.token_s],
                                       "prompt_tokens": r.prompt_len, "completion_tokens": r.output_len}) + "\n")
        self.timings.flush()


def bearer(key: str) -> Any:
    """Refuse (401) any request without the key as its bearer token."""
    @web.middleware
    async def check(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {key}":
            return error_response(BadRequest("a valid API key is required", 401, "authentication_error"))
        return await handler(request)

    return check


def build(args: argparse.Namespace, timings: TextIO | None) -> tuple[Completions, ContinuousEngine]:
    """Load the model and set the engine up (every shape warmed) before the port opens: a server that
    answers is ready."""
    device = devices.resolve(args.device)
    devices.use(device)
    devices.check_dtype(device, args.dtype)
    loaded = models.load(args.model, args.dtype, device, args.seed)
    static = FastEngine(loaded)
    engine = ContinuousEngine(static.decoder, device, graphs=static.graphs)
    engine.setup(args.max_num_seqs, args.max_model_len, args.max_num_batched_tokens)
    app = Completions(args.served_model_name or args.model, loaded.info.vocab, _tokenizer(args.model), timings)
    return app, engine


def _tokenizer(model: str) -> Any | None:
    """A local checkpoint's tokenizer, or None (presets have none)."""
    if not Path(model).is_dir():
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model, trust_remote_code=False)
    except (OSError, ValueError):
        return None


def main(args: argparse.Namespace) -> int:
    if args.max_num_batched_tokens < args.max_num_seqs:
        print("error: --max-num-batched-tokens must be ≥ --max-num-seqs", file=sys.stderr)
        return 2
    if args.max_model_len > model_context(args.model):
        print(f"error: --max-model-len {args.max_model_len} is over the model's context {model_context(args.model)}",
              file=sys.stderr)
        return 2
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not key:
        print(f"error: --api-key-env names {args.api_key_env}, which is not set", file=sys.stderr)
        return 2
    timings = args.timings.open("a") if args.timings else None
    completions, engine = build(args, timings)

    async def start(app: web.Application) -> None:
        completions.loop = asyncio.get_running_loop()
        completions.live = LiveEngine(engine, args.max_num_batched_tokens, completions.on_step,
                                      completions.on_failure).start()

    async def stop(app: web.Application) -> None:
        completions.live.close()

    app = web.Application(client_max_size=64 * 2**20, middlewares=[bearer(key)] if key else [])
    app.router.add_get("/v1/models", completions.models)
    app.router.add_post("/v1/completions", completions.completions)
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    print(f"serving {args.model} as {completions.name} on http://{args.host}:{args.port}/v1 (max_num_seqs "
          f"{args.max_num_seqs}, max_model_len {engine.max_len}, max_num_batched_tokens "
          f"{args.max_num_batched_tokens}, device {engine.device})", file=sys.stderr, flush=True)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)
    return 0
