"""The index page tells Streamlit's front end where the server is; every other response passes untouched."""
from __future__ import annotations

import asyncio

from batchscope.page_base import PageBaseMiddleware, base_script, with_base_script

PAGE = b"<!DOCTYPE html><html><head><title>Streamlit</title></head><body></body></html>"
BROWSER_ACCEPT = b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


def served(response_headers: list[tuple[bytes, bytes]], chunks: list[bytes], status: int = 200,
           accept: bytes = BROWSER_ACCEPT, method: str = "GET") -> tuple[list[dict], list[tuple[bytes, bytes]]]:
    """What a browser gets through the middleware from an app that answers with these headers and body chunks,
    and the request headers the app saw."""
    seen: list[tuple[bytes, bytes]] = []

    async def app(scope, receive, send) -> None:
        seen.extend(scope["headers"])
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        for index, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": index < len(chunks) - 1})

    sent: list[dict] = []

    async def send(message) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "method": method, "path": "/run",
             "headers": [(b"accept", accept), (b"accept-encoding", b"gzip, deflate")]}
    asyncio.run(PageBaseMiddleware(app, base_url_path="")(scope, receive, send))
    return sent, seen


def body_of(sent: list[dict]) -> bytes:
    return b"".join(message.get("body", b"") for message in sent if message["type"] == "http.response.body")


def test_the_base_is_the_origin_the_browser_used_and_the_path_the_app_is_served_under() -> None:
    assert base_script("") == b'<script>window.__streamlit={BACKEND_BASE_URL:location.origin+"/"}</script>'
    assert base_script("/") == base_script("")
    assert b'location.origin+"/tools/batchscope/"' in base_script("tools/batchscope/")


def test_the_script_goes_first_in_the_head_and_a_page_without_a_head_is_left_alone() -> None:
    assert with_base_script(b"<html><head><title>x</title>", b"<script>s</script>") == \
        b"<html><head><script>s</script><title>x</title>"
    assert with_base_script(b"plain text", b"<script>s</script>") == b"plain text"


def test_a_browser_navigation_gets_the_index_page_with_the_base_and_its_true_length() -> None:
    sent, seen = served([(b"content-type", b"text/html; charset=utf-8"), (b"content-length", b"80")],
                        [PAGE[:30], PAGE[30:]])
    body = body_of(sent)
    assert body == PAGE.replace(b"<head>", b"<head>" + base_script(""))
    headers = dict(sent[0]["headers"])
    assert sent[0]["status"] == 200 and headers[b"content-length"] == str(len(body)).encode()
    assert [key for key, _ in sent[0]["headers"]].count(b"content-length") == 1
    assert b"accept-encoding" not in dict(seen)  # so the page comes back plain and can be edited


def test_scripts_data_and_websocket_answers_pass_untouched_with_their_encoding_asked_for() -> None:
    script = [(b"content-type", b"text/javascript"), (b"content-length", b"8")]
    sent, seen = served(script, [b"let a=1;"], accept=b"*/*")
    assert body_of(sent) == b"let a=1;" and sent[0]["headers"] == script
    assert dict(seen)[b"accept-encoding"] == b"gzip, deflate"


def test_an_html_answer_that_is_encoded_not_found_or_not_to_a_get_is_sent_as_it_came() -> None:
    gzipped = [(b"content-type", b"text/html"), (b"content-encoding", b"gzip")]
    assert body_of(served(gzipped, [b"\x1f\x8b..."])[0]) == b"\x1f\x8b..."
    html = [(b"content-type", b"text/html")]
    assert body_of(served(html, [PAGE], status=404)[0]) == PAGE
    assert body_of(served(html, [PAGE], method="POST")[0]) == PAGE
