"""A server's capabilities, found in a point's setup with one small streamed request each: which API,
token ids or text, a way to force the output length, usage in the stream, and how the stream ends.

Strict servers (transformers serve, OpenAI's own API, most gateways) refuse a field they do not know, so
each optional field is tried alone and left out when refused. What was found goes into env.json and the
fingerprint (runners.modes.endpoint), so a run says how its requests were made.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from runners.engines.endpoint import Capabilities, EndpointClient

Log = Callable[[str], None]


def negotiate(client: EndpointClient, api: str, prompt_format: str, sample: list[int], text: str,
              log: Log) -> Capabilities:
    """The capabilities every measured request of a point follows; RuntimeError when the server takes no
    request BatchScope can make. `api` and `prompt_format` are the spec's (auto lets the server choose);
    `sample` is a prompt's first ids and `text` the same prompt as words (runners.workload.workload.text_prompt)."""
    caps = Capabilities(api="completions" if api == "auto" else api, prompt="text", length="none",
                        stream_options=False, usage="chunks", end="end of stream")
    if api == "auto":
        caps = _api(client, caps, text, log)
    if caps.api == "completions":
        caps = replace(caps, prompt=_prompt_form(client, caps, prompt_format, sample, text, log))
    elif prompt_format == "ids":
        raise RuntimeError("prompt_format ids needs the completions API: the server takes only chat")
    prompt = sample if caps.prompt == "ids" else text
    caps = _length(client, caps, prompt, log)
    return _stream(client, caps, prompt, len(sample), log)


def _api(client: EndpointClient, caps: Capabilities, text: str, log: Log) -> Capabilities:
    """Completions where the server takes it (token ids may then give exact prompt lengths), else chat."""
    refused, _ = client.probe(caps, text)
    if refused is None:
        return caps
    chat = replace(caps, api="chat")
    chat_refused, _ = client.probe(chat, text)
    if chat_refused is not None:
        raise RuntimeError(f"the server takes neither API: /completions {refused}; /chat/completions {chat_refused}")
    log(f"the server refused /completions ({refused}); requests go to /chat/completions")
    return chat


def _prompt_form(client: EndpointClient, caps: Capabilities, prompt_format: str, sample: list[int], text: str,
                 log: Log) -> str:
    """ids where the server takes them (exact lengths), else text; as prompt_format allows."""
    if prompt_format != "text":
        refused, _ = client.probe(replace(caps, prompt="ids"), sample)
        if refused is None:
            return "ids"
        if prompt_format == "ids":
            raise RuntimeError(f"the server refused a prompt of token ids: {refused}")
        log(f"the server refused token ids ({refused}); prompts go as text")
    refused, _ = client.probe(caps, text)
    if refused is not None:
        raise RuntimeError(f"the server refused a text prompt: {refused}")
    return "text"


def _length(client: EndpointClient, caps: Capabilities, prompt: list[int] | str, log: Log) -> Capabilities:
    """ignore_eos (vLLM, SGLang, TensorRT-LLM), else min_tokens (vLLM's sampling parameter, some gateways),
    else none: each request then ends where the server chooses."""
    for way in ("ignore_eos", "min_tokens"):
        refused, _ = client.probe(replace(caps, length=way), prompt)
        if refused is None:
            return replace(caps, length=way)
        log(f"the server refused {way} ({refused})")
    log("output lengths cannot be forced: each request's output length is what the server generated, and "
        "throughput is over those tokens")
    return caps


def _stream(client: EndpointClient, caps: Capabilities, prompt: list[int] | str, sent: int, log: Log) -> Capabilities:
    """Ask for usage with stream_options where the server takes it, then read from the probe's stream
    whether usage came and whether it ended with [DONE]."""
    asked = replace(caps, stream_options=True)
    refused, stream = client.probe(asked, prompt)
    if refused is None:
        caps = asked
    else:
        log(f"the server refused stream_options ({refused})")
        refused, stream = client.probe(caps, prompt)
        if refused is not None:
            raise RuntimeError(f"the server refused a streamed request: {refused}")
    failure = stream.failure(done_marker=False)
    if failure is not None:
        raise RuntimeError(f"the server's stream is not a whole completion: {failure}")
    counted = stream.count("prompt_tokens")
    return replace(caps, usage="server" if stream.count("completion_tokens") is not None else "chunks",
                   end="[DONE]" if stream.done else "end of stream",
                   prompt_tokens_added=None if counted is None else counted - sent)
