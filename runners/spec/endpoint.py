"""The endpoint mode in the spec: the continuous mode's load (an arrival rate or clients) sent to a running
OpenAI-compatible server, which may be restarted before each point from a command with a templated knob.
The options themselves are declared, with their meaning, on SweepSpec."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from runners.spec.continuous import LoadAxis, check_clients, check_load, check_slo, longest_request, parse_arrival
from runners.spec.options import SpecError, copy_given, record
from runners.spec.sweep import APIS, PROMPT_FORMATS, SweepSpec, check_context, check_draws

KNOBS = ("max_num_seqs", "max_num_batched_tokens")  # the spec fields a server command may template
TEXT_FIELDS = ("url", "model_name", "api_key_env", "server_labels", "server_command", "prompt_format", "api")
PLACEHOLDER = re.compile(r"\{(\w+)\}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class EndpointPoint(LoadAxis):
    """One point of an endpoint sweep: its load, and the server's batch limit when the sweep sets it."""

    arrival_rate: float | None  # requests/s (open loop), or None for a closed loop
    concurrency: int | None  # clients (closed loop), or None for Poisson arrivals
    max_num_seqs: int | None  # the server's batch limit, known only when the command templates it
    axis: str  # max_num_seqs, arrival_rate or concurrency
    added_for: str | None = None  # why refinement added it (runners.spec.refine.REASONS); None when planned
    larger = "larger values"  # what an OOM stop leaves out

    @property
    def batch_size(self) -> int:
        """The clients of a closed loop, else the server's batch limit; 0 when BatchScope does not know it
        (an open loop against a server it does not start)."""
        if self.axis == "concurrency" or self.max_num_seqs is None:
            return self.concurrency or 0
        return self.max_num_seqs


def templated(spec: SweepSpec) -> set[str]:
    """The knobs the server command holds as {placeholders}."""
    return set(PLACEHOLDER.findall(spec.server_command)) & set(KNOBS)


def server_argv(spec: SweepSpec, point: EndpointPoint) -> list[str]:
    """The command's argv for a point: split once like a shell line, each {knob} replaced inside its own
    argument, so no user text is ever parsed by a shell."""
    values = {"max_num_seqs": point.max_num_seqs, "max_num_batched_tokens": spec.max_num_batched_tokens}
    return [PLACEHOLDER.sub(lambda m: str(values[m[1]]) if m[1] in values else m[0], arg)
            for arg in shlex.split(spec.server_command)]


def points(spec: SweepSpec) -> list[EndpointPoint]:
    """The swept points in order: the one option given as a list, else the load's own axis."""
    rates = parse_arrival(spec.arrival) if spec.arrival else [None]
    clients = spec.concurrency or [None]
    limits = spec.max_num_seqs if "max_num_seqs" in templated(spec) else [None]
    axis = ("arrival_rate" if len(rates) > 1 else "concurrency" if len(clients) > 1 else
            "max_num_seqs" if len(limits) > 1 else "concurrency" if clients[0] else "arrival_rate")
    return [EndpointPoint(r, c, m, axis) for m in limits for r in rates for c in clients]


def check(spec: SweepSpec, values: dict[str, Any], found: dict[str, str], context: int | None) -> None:
    """Parse the endpoint options into `spec`, recording every problem by field in `found`."""
    if spec.engine != "endpoint":
        found.setdefault("engine", "mode endpoint measures a running server: choose engine endpoint")
    copy_given(spec, values, *TEXT_FIELDS, "request_timeout_s", "ready_timeout_s")
    record(found, "url", lambda: check_url(spec.url))
    if spec.api_key_env and not ENV_NAME.fullmatch(spec.api_key_env):
        found.setdefault("api_key_env", f"api_key_env names an environment variable (letters, digits, _), not the "
                                        f"key itself: {spec.api_key_env!r}")
    if spec.prompt_format not in PROMPT_FORMATS:
        found.setdefault("prompt_format", f"prompt_format must be one of {', '.join(PROMPT_FORMATS)}: "
                                          f"got {spec.prompt_format!r}")
    if spec.api not in APIS:
        found.setdefault("api", f"api must be one of {', '.join(APIS)}: got {spec.api!r}")
    elif spec.api == "chat" and spec.prompt_format == "ids":
        found.setdefault("prompt_format", "the chat API takes text: prompt_format ids needs api completions")
    record(found, "server_command", lambda: check_command(spec.server_command))
    check_load(spec, values, found)
    if len(spec.max_num_seqs) > 1 and "max_num_seqs" not in templated(spec) and "max_num_seqs" not in found:
        found.setdefault("max_num_seqs", "a list of max_num_seqs needs a server command holding {max_num_seqs}: "
                                         "only a restarted server takes a new batch limit")
    copy_given(spec, values, "num_requests", "max_num_batched_tokens")
    record(found, "num_requests", lambda: check_draws(spec, spec.num_requests, "num_requests"))
    check_clients(spec, found)
    check_slo(spec, values, found)
    if not {"prompt_len", "output_len", "num_requests"} & set(found):
        longest = longest_request(spec)
        record(found, "prompt_len", lambda: check_context(longest, context))


def check_url(url: str) -> None:
    """An http(s) base URL with a host, and no credentials in it (the key comes from api_key_env)."""
    try:
        parts = urlsplit(url)
    except ValueError as err:  # an unclosed [IPv6 address]
        raise SpecError("url", f"not a URL ({err}): {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError("url", f"url must be http://HOST:PORT/v1 or https://...: {url!r}")
    try:
        port = parts.port
    except ValueError as err:  # past 65535, or not a number
        raise SpecError("url", f"{err} in {url!r}") from None
    if port == 0:
        raise SpecError("url", f"port 0 is no server's port: {url!r}")
    if parts.username or parts.password:
        raise SpecError("url", "put no credentials in the url: name the variable holding the key in api_key_env")
    if parts.query or parts.fragment:
        raise SpecError("url", f"url is the API's base, without ?query or #fragment: {url!r}")


def check_command(command: str) -> None:
    """A server command splits into words, and its {placeholders} are knobs the sweep sets."""
    if not command:
        return
    try:
        words = shlex.split(command)
    except ValueError as err:
        raise SpecError("server_command", f"cannot split the command into words: {err}") from None
    if not words:
        raise SpecError("server_command", "the command is empty")
    unknown = sorted(set(PLACEHOLDER.findall(command)) - set(KNOBS))
    if unknown:
        raise SpecError("server_command", f"unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)}: "
                                          f"the sweep sets {' and '.join('{' + k + '}' for k in KNOBS)}")
