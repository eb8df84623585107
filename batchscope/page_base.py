"""Tell Streamlit's front end where the server is, so a deep link (`/run?run=…`) connects at once.

Opened at any page but Home, Streamlit's front end does not know whether `/run` is a page or the base path
the app is served under, so it probes `/run/_stcore/health` and `…/host-config` first, gets two 404s, waits
100 ms and retries at `/` (streamlit/streamlit#7074): two console errors and ≈ 0.14 s on every deep link
(docs/benchmarks.md, issue 34). The front end skips the probe when the page that loads it sets
`window.__streamlit.BACKEND_BASE_URL`, which a host page embedding the app would; this ASGI middleware
writes that line into the index page the server sends, with the base path it serves under.
"""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HEAD = b"<head>"


def base_script(base_url_path: str) -> bytes:
    """The line the index page gets: the server's origin (as the browser sees it) and its base path."""
    base = "/" + base_url_path.strip("/")
    base = base if base == "/" else base + "/"
    return f"<script>window.__streamlit={{BACKEND_BASE_URL:location.origin+{json.dumps(base)}}}</script>".encode()


def with_base_script(page: bytes, script: bytes) -> bytes:
    """`page` with `script` first in its head; a page without a head is returned as it is."""
    at = page.find(HEAD)
    return page if at < 0 else page[:at + len(HEAD)] + script + page[at + len(HEAD):]


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes:
    return next((value for key, value in headers if key.lower() == name), b"")


class PageBaseMiddleware:
    """Writes `base_script` into every HTML page the app sends; every other response passes untouched.

    Only a request that accepts HTML (a browser's navigation) is looked at. Its `Accept-Encoding` is dropped,
    so the index page (3 KB) comes back uncompressed and can be edited; a response that is not HTML, or is
    encoded anyway, streams through as it came."""

    def __init__(self, app: ASGIApp, base_url_path: str | None = None) -> None:
        if base_url_path is None:
            from streamlit import config  # read here, once the server's options are loaded

            base_url_path = config.get_option("server.baseUrlPath") or ""
        self.app = app
        self.script = base_script(base_url_path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = scope.get("headers", [])
        if scope["type"] != "http" or scope["method"] != "GET" or b"text/html" not in _header(headers, b"accept"):
            await self.app(scope, receive, send)
            return
        scope = {**scope, "headers": [(key, value) for key, value in headers if key.lower() != b"accept-encoding"]}
        start: Message | None = None
        body: list[bytes] = []

        async def edit_html(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                response_headers = message.get("headers", [])
                is_plain_html = (message["status"] == 200
                                 and _header(response_headers, b"content-type").startswith(b"text/html")
                                 and not _header(response_headers, b"content-encoding"))
                if is_plain_html:
                    start = message
                    return
            elif message["type"] == "http.response.body" and start is not None:
                body.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                page = with_base_script(b"".join(body), self.script)
                kept = [(key, value) for key, value in start.get("headers", []) if key.lower() != b"content-length"]
                await send({**start, "headers": [*kept, (b"content-length", str(len(page)).encode())]})
                await send({"type": "http.response.body", "body": page, "more_body": False})
                return
            await send(message)

        await self.app(scope, receive, edit_html)
