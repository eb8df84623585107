"""Continuous batching in the spec: the load (arrival rate or clients), the batch limit, and which of
them the sweep varies. The options themselves are declared, with their meaning, on SweepSpec."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runners.spec.options import SpecError, copy_given, figure, record
from runners.spec.slo import SLO_METRICS
from runners.spec.sweep import SweepSpec, check_context, check_draws

MAX_RATE = 1_000_000.0  # requests/s: past any server, and every arrival gap stays a finite number


class LoadAxis:
    """What a load point shows on its sweep's x axis: the value of the option the sweep varies
    (`axis`: max_num_seqs, arrival_rate or concurrency), shared by continuous and endpoint points."""

    axis: str
    max_num_seqs: int | None
    arrival_rate: float | None
    concurrency: int | None

    @property
    def value(self) -> float:
        return float({"max_num_seqs": self.max_num_seqs, "arrival_rate": self.arrival_rate,
                      "concurrency": self.concurrency}[self.axis])

    @property
    def label(self) -> str:
        return f"{self.axis} {self.value:g}"


@dataclass(frozen=True)
class ContinuousPoint(LoadAxis):
    """One point of a continuous sweep: the load and the batch limit it runs with."""

    max_num_seqs: int
    arrival_rate: float | None  # requests/s (open loop), or None for a closed loop
    concurrency: int | None  # clients (closed loop), or None for Poisson arrivals
    axis: str  # the option the sweep varies: max_num_seqs, arrival_rate or concurrency
    added_for: str | None = None  # why refinement added it (runners.spec.refine.REASONS); None when planned
    larger = "larger values"  # what an OOM stop leaves out

    @property
    def batch_size(self) -> int:
        """What the static charts key on: the concurrency of a concurrency sweep, else max_num_seqs."""
        return self.concurrency if self.axis == "concurrency" else self.max_num_seqs


def parse_arrival(value: Any) -> list[float]:
    """`poisson:RATE` or `poisson:R1,R2,...` → rates in requests/s, each over 0 and at most MAX_RATE."""
    text = str(value).strip()
    if not text.startswith("poisson:"):
        raise SpecError("arrival", f"arrival must be poisson:RATE or poisson:R1,R2,... (requests/s): {text!r}")
    items = [x for x in text[len("poisson:"):].replace(" ", ",").split(",") if x]
    if not items:
        raise SpecError("arrival", "give at least one rate, e.g. poisson:4")
    rates = []
    for item in items:
        try:
            rate = float(item)
        except ValueError:
            raise SpecError("arrival", f"not a rate: {item!r}") from None
        if not 0 < rate <= MAX_RATE:  # NaN and infinity too
            raise SpecError("arrival", f"rates must be positive requests/s, at most {figure(MAX_RATE)}: {item!r}")
        rates.append(rate)
    return sorted(set(rates))


def points(spec: SweepSpec) -> list[ContinuousPoint]:
    """The swept points in order; the axis is the one option given as a list (max_num_seqs by default)."""
    rates = parse_arrival(spec.arrival) if spec.arrival else [None]
    clients = spec.concurrency or [None]
    axis = ("arrival_rate" if len(rates) > 1 else "concurrency" if len(clients) > 1 else "max_num_seqs")
    return [ContinuousPoint(m, r, c, axis) for m in spec.max_num_seqs for r in rates for c in clients]


def longest_request(spec: SweepSpec) -> int:
    """The most KV tokens (prompt + output) any request of the workload holds: a slot's length."""
    return spec.longest_request(spec.num_requests)


def check(spec: SweepSpec, values: dict[str, Any], found: dict[str, str], context: int | None) -> None:
    """Parse the continuous options into `spec`, recording every problem by field in `found`."""
    if spec.engine != "fast":
        found.setdefault("engine", "continuous mode runs on the fast engine")
    check_load(spec, values, found)
    copy_given(spec, values, "num_requests", "max_num_batched_tokens", "kv_cache_tokens", "gpu_memory_utilization")
    record(found, "num_requests", lambda: check_draws(spec, spec.num_requests, "num_requests"))
    check_clients(spec, found)
    if spec.max_num_batched_tokens < max(spec.max_num_seqs):
        found.setdefault("max_num_batched_tokens", f"max_num_batched_tokens ({spec.max_num_batched_tokens}) "
                                                   f"must be ≥ max_num_seqs ({max(spec.max_num_seqs)}): every "
                                                   f"running sequence decodes one token per step")
    check_slo(spec, values, found)
    if not {"prompt_len", "output_len", "num_requests", "kv_cache_tokens"} & set(found):
        longest = longest_request(spec)
        record(found, "prompt_len", lambda: check_context(longest, context))
        if spec.kv_cache_tokens and longest > spec.kv_cache_tokens:
            found.setdefault("kv_cache_tokens", f"kv_cache_tokens ({spec.kv_cache_tokens}) cannot hold the "
                                                f"longest request ({longest} tokens), which would wait forever")


def check_load(spec: SweepSpec, values: dict[str, Any], found: dict[str, str]) -> None:
    """The batch limit and the load (an arrival rate or clients, one of them given), at most one of them a
    list: the sweep's axis. Shared with the endpoint mode, whose server takes the same load."""
    if values.get("max_num_seqs") in ("", []):
        found.setdefault("max_num_seqs", "no max_num_seqs given")
    elif "max_num_seqs" in values:
        spec.max_num_seqs = values["max_num_seqs"]
    rates = None
    if values.get("arrival"):
        spec.arrival = values["arrival"]
        rates = record(found, "arrival", lambda: parse_arrival(spec.arrival))
    if values.get("concurrency"):
        spec.concurrency = values["concurrency"]
    copy_given(spec, values, "think_ms", "requests_per_client")
    if spec.think_ms and not spec.concurrency:
        found.setdefault("think_ms", "a think time is a closed-loop client's wait: give a concurrency with it")
    if spec.requests_per_client and not spec.concurrency:
        found.setdefault("requests_per_client", "requests per client count a closed loop's clients: give a "
                                                "concurrency with it")
    if spec.arrival and spec.concurrency:
        found.setdefault("concurrency", "give either an arrival rate or a concurrency, not both")
    elif not spec.arrival and not spec.concurrency and "arrival" not in found:
        found.setdefault("arrival", f"{spec.mode} mode needs a load: an arrival rate (poisson:RATE) or a "
                                    f"concurrency")
    lists = [name for name, n in (("max_num_seqs", len(spec.max_num_seqs)), ("arrival", len(rates or [])),
                                  ("concurrency", len(spec.concurrency))) if n > 1]
    if len(lists) > 1:
        found.setdefault(lists[1], f"only one axis can be swept: {' and '.join(lists)} are both lists")


def requests_per_point(num_requests: int, requests_per_client: int, concurrency: int | None) -> int:
    """How many requests a point serves per repeat: the whole workload, or with requests per client set, that
    many per client of a closed loop, the first of the workload (never more than all of it). The app reads a
    run's spec.json with it too."""
    if requests_per_client and concurrency:
        return min(num_requests, requests_per_client * concurrency)
    return num_requests


def check_clients(spec: SweepSpec, found: dict[str, str]) -> None:
    """A closed loop of more clients than requests never has them all in flight: its point would be labelled with
    a load it did not run (16 clients over 8 requests measure 8). Shared with the endpoint mode."""
    clients = max(spec.concurrency, default=0)
    if clients > spec.num_requests and not {"concurrency", "num_requests"} & set(found):
        found["concurrency"] = (f"concurrency {clients} is more clients than requests (num_requests "
                                f"{spec.num_requests}): at most {spec.num_requests} would ever be in flight; give "
                                f"num_requests ≥ {clients}")


def check_slo(spec: SweepSpec, values: dict[str, Any], found: dict[str, str]) -> None:
    copy_given(spec, values, "slo_metric", "slo_ms")
    if spec.slo_metric not in SLO_METRICS:
        found.setdefault("slo_metric", f"slo_metric must be one of {', '.join(SLO_METRICS)}: got {spec.slo_metric!r}")
