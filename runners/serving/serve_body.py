"""What `runners serve` accepts in a request body, checked field by field before the engine sees it.

Every field is either one this server honours or takes as documented (docs/endpoint.md), or it is refused
with a 400 that names it (`param`): a client never gets an answer that silently ignored part of what it
asked for (`logprobs`, `stop`, `temperature: "hot"`). Pure Python, so the rules are unit-tested.

Text on a model without a tokenizer (every preset): the prompt, or each chat message's content, is split
on whitespace and each piece is one token: a decimal number is that token id, a word of
runners.workload.workload.TEXT_WORDS (the words the endpoint engine draws text prompts from) is its index there.
The chat prompt is the messages' tokens in order, no template added (the preset has none); a checkpoint
with a tokenizer applies its own chat template.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runners.workload.workload import TEXT_WORDS

WORD_IDS = {word: i for i, word in enumerate(TEXT_WORDS)}
ROLES = ("system", "user", "assistant")


class BadRequest(Exception):
    """A request the server refuses: `status`, an OpenAI-style error body and the field at fault."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.param = status, kind, param


@dataclass(frozen=True)
class Parsed:
    """A checked request: its prompt ids, forced output length, streaming and usage choices, `user` tag."""

    prompt: list[int]
    max_tokens: int
    stream: bool
    usage: bool  # a streamed answer ends with a usage chunk (always for a whole answer)
    user: str | None


def _whole(low: int) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise BadRequest(f"{name} must be a whole number ≥ {low}, got {value!r}", param=name)
    return check


def _number(low: float, high: float) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise BadRequest(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}", param=name)
    return check


def _kind(kind: type, text: str) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        if not isinstance(value, kind):
            raise BadRequest(f"{name} must be {text}, got {value!r}", param=name)
    return check


def _one(name: str, value: Any) -> None:
    if value != 1 or isinstance(value, bool):
        raise BadRequest(f"{name} must be 1: this server makes one completion per request", param=name)


def _stream_options(name: str, value: Any) -> None:
    if (not isinstance(value, dict) or set(value) - {"include_usage"}
            or not isinstance(value.get("include_usage", False), bool)):
        raise BadRequest(f"{name} must be {{\"include_usage\": true|false}}, got {value!r}", param=name)


# Fields both APIs take. Outputs are greedy and always forced to max_tokens (no early end), so
# ignore_eos and min_tokens (≤ max_tokens) hold whatever their value; temperature, top_p and seed are
# checked and taken, not used.
COMMON: dict[str, Callable[[str, Any], None]] = {
    "model": _kind(str, "a string"), "max_tokens": _whole(1), "stream": _kind(bool, "true or false"),
    "stream_options": _stream_options, "user": _kind(str, "a string"), "n": _one,
    "temperature": _number(0.0, 2.0), "top_p": _number(0.0, 1.0), "seed": _whole(0),
    "ignore_eos": _kind(bool, "true or false"), "min_tokens": _whole(0),
}
FIELDS = {"completions": {**COMMON, "prompt": lambda name, value: None},  # the prompt is read by prompt_ids
          "chat": {**COMMON, "messages": _kind(list, "a list of messages"), "max_completion_tokens": _whole(1)}}


def parse(body: Any, api: str, name: str, vocab: int, tokenizer: Any | None) -> Parsed:
    """A completions or chat body (`api`) checked field by field, or BadRequest naming the field."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    fields = FIELDS[api]
    for key, value in body.items():
        if key not in fields:
            raise BadRequest(f"{key} is not supported by this server (it takes {', '.join(sorted(fields))})",
                             param=key)
        fields[key](key, value)
    if body.get("model") not in (None, name):
        raise BadRequest(f"The model `{body.get('model')}` does not exist.", 404, "NotFoundError", "model")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 16))
    if body.get("min_tokens", 0) > max_tokens:
        raise BadRequest(f"min_tokens ({body['min_tokens']}) must be ≤ max_tokens ({max_tokens})", param="min_tokens")
    if api == "chat":
        prompt = chat_ids(body.get("messages"), vocab, tokenizer)
    else:
        prompt = prompt_ids(body.get("prompt"), vocab, tokenizer)
    stream = body.get("stream", False)
    usage = not stream or (body.get("stream_options") or {}).get("include_usage", False)
    return Parsed(prompt, max_tokens, stream, usage, body.get("user"))


def prompt_ids(prompt: Any, vocab: int, tokenizer: Any | None) -> list[int]:
    """Token ids as sent, or text (the checkpoint's tokenizer, else ids and words as the module says)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids = text_ids(prompt, "prompt", tokenizer)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        ids = prompt
    else:
        raise BadRequest("prompt must be one non-empty list of token ids or one string", param="prompt")
    return checked(ids, vocab, "prompt")


def chat_ids(messages: Any, vocab: int, tokenizer: Any | None) -> list[int]:
    """The messages' tokens: the checkpoint's chat template where it has one, else each content's tokens
    in order."""
    if not messages:
        raise BadRequest("messages must be a non-empty list of {role, content}", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            raise BadRequest(f"messages[{i}] must be {{role, content}} and nothing else, got {m!r}",
                             param=f"messages[{i}]")
        if m["role"] not in ROLES:
            raise BadRequest(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {m['role']!r}",
                             param=f"messages[{i}].role")
        if not isinstance(m["content"], str):
            raise BadRequest(f"messages[{i}].content must be a string, got {m['content']!r}",
                             param=f"messages[{i}].content")
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        ids = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                 return_dict=False))
    else:
        ids = [t for i, m in enumerate(messages) for t in text_ids(m["content"], f"messages[{i}].content", tokenizer)]
    return checked(ids, vocab, "messages")


def text_ids(text: str, param: str, tokenizer: Any | None) -> list[int]:
    """A text's tokens: the checkpoint's tokenizer, else one token per whitespace-separated id or word."""
    if tokenizer is not None:
        return list(tokenizer.encode(text))
    ids = []
    for piece in text.split():
        if piece.isdecimal():
            ids.append(int(piece))
        elif piece in WORD_IDS:
            ids.append(WORD_IDS[piece])
        else:
            raise BadRequest(f"{param}: {piece[:40]!r} is neither a token id nor one of the words this server "
                             f"maps to ids (its model has no tokenizer)", param=param)
    return ids


def checked(ids: list[int], vocab: int, param: str) -> list[int]:
    if not ids or not all(0 <= t < vocab for t in ids):
        raise BadRequest(f"{param}: token ids must lie in [0, {vocab}), and there must be at least one", param=param)
    return ids
