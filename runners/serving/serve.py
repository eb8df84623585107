"""`python -m runners serve`: an OpenAI-compatible streaming server over BatchScope's continuous engine.

One model, `POST /v1/completions` and `POST /v1/chat/completions` (streamed or not) and `GET /v1/models`,
so the `endpoint` engine has a real server to measure on any machine, and a served sweep can be set beside
an in-process one of the same engine. Prompts are token ids (a list of ints) or text: a checkpoint's
tokenizer, else whitespace-separated ids and the workload's words (runners.serving.serve_body says exactly what a
body may hold; anything else, or a field of the wrong type, is a 400 naming the field). Outputs are greedy
and forced to `max_tokens` (no early end), as in every BatchScope sweep. A preset has no tokenizer, so a
streamed token's text is its id (" 1234").

`--api-key-env NAME` makes every request carry `Authorization: Bearer <the variable's value>` (vLLM's
`--api-key`, with the key kept out of the command line). A streamed answer's usage chunk carries an extra
field OpenAI clients ignore, `server_timing`: when this server took the request (`received`), handed it to
the engine (`submitted`), the engine's loop gave it to the scheduler (`handed`, at a step boundary), the
scheduler gave it a slot (`admitted`), the step that sampled its first token ended (`first_token`) and the
first token's chunk went to the socket (`first_flush`), all in perf_counter seconds; `GET /v1/models`
answers with this clock's reading in the `X-Server-Clock` header, so a client can measure its offset
(runners.engines.endpoint). `--timings FILE` appends one JSON line per finished request with the engine's own times (perf_counter
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

from runners.engines import devices, models
from runners.engines.continuous import ContinuousEngine
from runners.engines.fast import FastEngine
from runners.engines.live import LiveEngine
from runners.engines.scheduler import Request
from runners.serving.serve_body import BadRequest, parse
from runners.spec import model_context
from runners.spec.validate import quantised_head_problem

STOP = object()  # the end of a request's tokens on its queue
# The engine's thread and the event loop share the GIL: a thread that wants it waits until the holder's
# switch interval (5 ms by default) runs out, so every wake of the loop (a request in, a step's tokens out)
# and every step the engine starts after the loop's writes could wait that long. Hand it over sooner.
GIL_SWITCH_S = 0.0005
CLOCK_HEADER = "X-Server-Clock"  # /v1/models answers with this server's perf_counter (a client's clock offset)


def error_response(err: BadRequest) -> web.Response:
    return web.json_response({"error": {"message": str(err), "type": err.kind, "param": err.param, "code": err.status}},
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
        return web.json_response({"object": "list", "data": [card]},
                                  headers={CLOCK_HEADER: repr(time.perf_counter())})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, "completions")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, "chat")

    async def _answer(self, request: web.Request, api: str) -> web.StreamResponse:
        received = time.perf_counter()
        try:
            asked = parse(await request.json(), api, self.name, self.vocab, self.tokenizer)
            r = self.live.submit(asked.prompt, asked.max_tokens)
        except json.JSONDecodeError:
            return error_response(BadRequest("the body is not JSON"))
        except BadRequest as err:
            return error_response(err)
        except ValueError as err:
            return error_response(BadRequest(str(err), param="max_tokens"))
        except RuntimeError as err:
            return error_response(BadRequest(str(err), 503, "server_error"))
        queue: asyncio.Queue = asyncio.Queue()
        self.streams[r.index] = queue
        chat = api == "chat"
        try:
            if asked.stream:
                return await self._stream(request, r, queue, asked.usage, chat, received)
            return await self._whole(r, queue, chat)
        finally:
            del self.streams[r.index]
            self._log(asked.user, received, r)
            self.live.forget(r)

    def text(self, token: int) -> str:
        return self.tokenizer.decode([token]) if self.tokenizer is not None else f" {token}"

    def chunk(self, r: Request, text: str | None, finish: str | None, chat: bool) -> dict[str, Any]:
        """A streamed chunk (no choice for the usage chunk): a completion's `text`, a chat `delta`."""
        if text is None:
            choices = []
        elif chat:
            choices = [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}]
        else:
            choices = [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]
        return {"id": f"{'chatcmpl' if chat else 'cmpl'}-{r.index}", "created": self.created, "model": self.name,
                "object": "chat.completion.chunk" if chat else "text_completion", "choices": choices}

    @staticmethod
    def usage(r: Request, made: int) -> dict[str, int]:
        return {"prompt_tokens": r.prompt_len, "completion_tokens": made, "total_tokens": r.prompt_len + made}

    async def _stream(self, request: web.Request, r: Request, queue: asyncio.Queue, usage: bool, chat: bool,
                      received: float) -> web.StreamResponse:
        """The tokens as they come, one chunk each; the usage chunk (when asked for) also carries
        `server_timing`, the request's times on this server's clock (see the module's doc)."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        if chat:  # the assistant's role first, as OpenAI's chat stream does; it carries no token
            role = self.chunk(r, "", None, chat)
            role["choices"][0]["delta"] = {"role": "assistant", "content": ""}
            await response.write(sse(role))
        made, timing = 0, None
        while (item := await queue.get()) is not STOP:
            if isinstance(item, BaseException):  # the engine died: say so inside the stream, no [DONE]
                await response.write(sse({"error": {"message": f"engine failed: {item}", "type": "server_error"}}))
                return response
            made += 1
            event = sse(self.chunk(r, self.text(item), "length" if made == r.output_len else None, chat))
            if made == 1:  # stamped as the chunk goes to the socket: the client may read it before write returns
                timing = {"clock": "perf_counter", "received": received, **self.live.stamps(r),
                          "first_flush": time.perf_counter()}
            await response.write(event)
        if usage:
            await response.write(sse({**self.chunk(r, None, None, chat), "usage": self.usage(r, made),
                                      "server_timing": timing}))
        await response.write(sse("[DONE]"))
        await response.write_eof()
        return response

    async def _whole(self, r: Request, queue: asyncio.Queue, chat: bool) -> web.Response:
        tokens = []
        while (item := await queue.get()) is not STOP:
            if isinstance(item, BaseException):
                return error_response(BadRequest(f"engine failed: {item}", 500, "server_error"))
            tokens.append(item)
        text = "".join(self.text(t) for t in tokens)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": "length"}
            body = {"id": f"chatcmpl-{r.index}", "object": "chat.completion", "created": self.created,
                    "model": self.name, "choices": [choice]}
        else:
            body = self.chunk(r, text, "length", chat)
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
    loaded = models.load(args.model, args.dtype, device, args.seed, args.quantize_lm_head)
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
    if args.quantize_lm_head and (problem := quantised_head_problem("fast", args.dtype, args.model)):
        print(f"error: --quantize-lm-head: {problem}", file=sys.stderr)
        return 2
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not key:
        print(f"error: --api-key-env names {args.api_key_env}, which is not set", file=sys.stderr)
        return 2
    timings = args.timings.open("a") if args.timings else None
    completions, engine = build(args, timings)
    sys.setswitchinterval(GIL_SWITCH_S)

    async def start(app: web.Application) -> None:
        completions.loop = asyncio.get_running_loop()
        completions.live = LiveEngine(engine, args.max_num_batched_tokens, completions.on_step,
                                      completions.on_failure).start()

    async def stop(app: web.Application) -> None:
        completions.live.close()

    app = web.Application(client_max_size=64 * 2**20, middlewares=[bearer(key)] if key else [])
    app.router.add_get("/v1/models", completions.models)
    app.router.add_post("/v1/completions", completions.completions)
    app.router.add_post("/v1/chat/completions", completions.chat)
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    print(f"serving {args.model} as {completions.name} on http://{args.host}:{args.port}/v1 (max_num_seqs "
          f"{args.max_num_seqs}, max_model_len {engine.max_len}, max_num_batched_tokens "
          f"{args.max_num_batched_tokens}, device {engine.device})", file=sys.stderr, flush=True)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)
    return 0
