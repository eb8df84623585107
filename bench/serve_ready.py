"""Wait for an OpenAI-compatible server a bench script started: until it lists a model, then one short chat
request, so whatever the server sets up on its first request (`transformers serve` starts its continuous
batching manager then, and on CPU that takes tens of seconds) is done before a sweep's setup probes it.

Fails at once when the server's process has exited (its log says why). Standard library only.

    python3 bench/serve_ready.py URL PID SECONDS     (URL: the base, e.g. http://127.0.0.1:8000/v1)
"""
from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path

POLL_S = 0.5


def alive(pid: int) -> bool:
    """The process exists and is no zombie (an exited child of the script waits as one until reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def first_model(url: str) -> str | None:
    """The first model the server lists; None while it does not answer or lists none."""
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as response:
            listed = json.load(response).get("data") or []
    except (OSError, ValueError):
        return None
    return listed[0]["id"] if listed else None


def main(url: str, pid: int, seconds: float) -> int:
    start = time.monotonic()
    model = None
    while model is None:
        if not alive(pid):
            print(f"the server (pid {pid}) exited before it answered", file=sys.stderr)
            return 1
        if time.monotonic() - start > seconds:
            print(f"the server listed no model in {seconds:g} s", file=sys.stderr)
            return 1
        model = first_model(url)
        if model is None:
            time.sleep(POLL_S)
    listed = time.monotonic() - start
    body = {"model": model, "messages": [{"role": "user", "content": "the city"}], "max_tokens": 1,
            "temperature": 0.0}
    request = urllib.request.Request(f"{url}/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=max(1.0, seconds - listed)) as response:
            response.read()
    except OSError as err:
        print(f"the server's first chat request failed: {err}", file=sys.stderr)
        return 1
    print(f"{model} listed after {listed:.1f} s, first chat answer after {time.monotonic() - start:.1f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
