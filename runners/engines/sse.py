"""A streamed completion as it arrives: server-sent events out of raw bytes, and the OpenAI completion or
chat-completion chunks inside them, each token-carrying chunk timed when the bytes that completed it were read.

Pure Python (no HTTP), so the parsing rules are unit-tested on hand-written streams: events end at a
blank line, `data:` lines of one event join with newlines, comments and other fields are ignored, lines
may end in \\n, \\r\\n or \\r, and a chunk boundary may fall anywhere, even inside a UTF-8 character.
"""
from __future__ import annotations

import codecs
import json
import re
from typing import Any

LINE_END = re.compile(r"\r\n|\r|\n")
DONE = "[DONE]"


class EventParser:
    """Server-sent events from bytes as they arrive: `feed` returns the data of each event it completed."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._buffer = ""
        self._data: list[str] = []

    def feed(self, raw: bytes) -> list[str]:
        self._buffer += self._decoder.decode(raw)
        events: list[str] = []
        while (end := LINE_END.search(self._buffer)) is not None:
            if end.group() == "\r" and end.end() == len(self._buffer):
                break  # a \r\n may be split between reads: wait for the next byte
            line, self._buffer = self._buffer[:end.start()], self._buffer[end.end():]
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                if name == "data":
                    self._data.append(value[1:] if value.startswith(" ") else value)
        return events


class CompletionStream:
    """One `/v1/completions` or `/v1/chat/completions` stream: when each token-carrying chunk arrived, the
    usage the server counted, and how the stream ended.

    A chunk carries a token when its choice has a `text` (chat: a `delta.content`), even an empty one,
    which a detokenizer holding back part of a character sends; except an empty closing chunk that only
    sets `finish_reason` after tokens came, and a chat delta that only announces the assistant's `role`.
    A chunk with no choices (the usage chunk) carries none.
    """

    def __init__(self, chat: bool = False) -> None:
        self.chat = chat
        self.events = EventParser()
        self.chunk_s: list[float] = []
        self.usage: dict[str, Any] | None = None
        self.done = False  # [DONE] arrived
        self.finished = False  # a choice carried a finish_reason
        self.error: str | None = None  # an error the server sent inside the stream
        self.server_timing: dict[str, Any] | None = None  # `runners serve`'s own times (its usage chunk)

    def feed(self, raw: bytes, t: float) -> None:
        """Bytes read at time `t`."""
        for data in self.events.feed(raw):
            self._event(data, t)

    def _event(self, data: str, t: float) -> None:
        if data == DONE:
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            self.error = self.error or f"a chunk is not JSON: {data[:80]!r}"
            return
        if not isinstance(chunk, dict):
            self.error = self.error or f"a chunk is not a JSON object: {data[:80]!r}"
            return
        if "error" in chunk:
            err = chunk["error"]
            self.error = self.error or str(err.get("message", err) if isinstance(err, dict) else err)
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if isinstance(chunk.get("server_timing"), dict):
            self.server_timing = chunk["server_timing"]
        choices = chunk.get("choices") or []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        self.finished = self.finished or choice.get("finish_reason") is not None
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        piece = delta.get("content") if self.chat else choice.get("text")
        if piece is not None:
            closing = piece == "" and choice.get("finish_reason") is not None and self.chunk_s
            if not (closing or (piece == "" and "role" in delta)):
                self.chunk_s.append(t)

    def count(self, name: str) -> int | None:
        """`prompt_tokens` or `completion_tokens` as the server counted them, None when it did not say."""
        value = (self.usage or {}).get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def failure(self, done_marker: bool = True) -> str | None:
        """Why the stream is not a whole completion: an error sent, no token, or its end missing: [DONE]
        where the server sends one (`done_marker`), else a finish_reason before the connection closed;
        None when whole."""
        if self.error is not None:
            return "server error in stream"
        if not (self.done if done_marker else self.done or self.finished):
            return "truncated stream"
        if not self.chunk_s:
            return "no tokens"
        return None


def token_times(chunk_s: list[float], tokens: int) -> list[float]:
    """A time per token: the chunks' own when each chunk carried one token; when the server counted more
    tokens than chunks (a chunk carried several), they are spread evenly from the first chunk to the last."""
    if tokens == len(chunk_s) or tokens < 1:
        return list(chunk_s)
    first, last = chunk_s[0], chunk_s[-1]
    if tokens == 1:
        return [first]
    return [first + (last - first) * k / (tokens - 1) for k in range(tokens)]
