"""Utilisation means and energy of one point, from the telemetry samples taken while it ran."""
from __future__ import annotations

import functools
import operator
import statistics
from typing import Any, NamedTuple

from runners.metrics.loaded import from_row
from runners.metrics.repeat import Row
from runners.results.schemas import UTIL_MEANS
from runners.telemetry.telemetry import clock_reason_names

Sample = dict[str, Any]


class Window(NamedTuple):
    """A measured repeat on the host clock (perf_counter seconds): start, first token, end, and its load window
    (None: a static batch or a load sent at once, whose whole repeat is the load)."""

    repeat: int
    start: float
    first_token: float
    end: float
    load: tuple[float, float] | None = None

    def loaded(self, row: Row) -> Window:
        """This repeat with the load window its row records (ms from the repeat's start) put on the host clock."""
        load = from_row(row)
        if load is None:
            return self
        return self._replace(load=(self.start + load.start_ms / 1e3, self.start + load.end_ms / 1e3))


def tag_samples(rows: list[Sample], windows: list[Window]) -> list[Sample]:
    """Repeat and phase from the device timeline: prefill until the first token, decode after.

    The host-side `stage`, and `loaded` (taken inside a repeat's load window, or inside a repeat that has none),
    stay on each row until the point is summarised, then are dropped.
    """
    for row in rows:
        stage, host_t = row["stage"], row.pop("host_t")
        row["repeat"], row["phase"], row["loaded"] = -1, "idle" if stage == "measure" else stage, False
        for window in windows:
            if window.start <= host_t <= window.end:
                row["repeat"] = window.repeat
                row["phase"] = "prefill" if host_t <= window.first_token else "decode"
                row["loaded"] = window.load is None or window.load[0] <= host_t <= window.load[1]
                break
    return rows


def utilisation(samples: list[Sample], point_index: int, windows: list[Window], output_tokens: int) -> dict[str, Any]:
    """Means over the samples inside this point's measured repeats, or inside their load windows where they
    have them (and over decode only; with several GPUs, over all of them); energy = each GPU's mean power inside
    a repeat × the repeat's length, summed.

    A continuous or endpoint repeat drains after its last arrival, with ever fewer requests in flight; its
    means are over the load window, as its throughput is (runners.metrics.loaded): on an H200 at 512 clients
    the whole repeat read 39.8 % DRAM bandwidth util where the load window read 33.3 % (docs/benchmarks.md,
    twenty-ninth session). Samples from the stages around the repeats (setup, graph capture, warm-up, the
    previous point's tail) never count. A repeat or window shorter than the sampling period (a tiny CPU batch)
    may hold no sample: then the repeats' samples, or this point's measure-stage samples, stand in for the
    means, and energy is left unknown without a sample inside each repeat. Energy (over whole repeats) per
    output token divides by `output_tokens`, every token the measured repeats produced. The clock range and
    reasons for the trust checks are over whole repeats: a throttle in the drain is still a throttle.
    """
    own = [s for s in samples if s["point_index"] == point_index]
    in_repeats = [s for s in own if s["repeat"] >= 0]
    measured = in_repeats or [s for s in own if s["stage"] == "measure"]
    loaded = [s for s in measured if s["loaded"]] or measured
    decode = [s for s in loaded if s["phase"] == "decode"]

    def mean(rows: list[Sample], key: str) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None]
        return statistics.fmean(values) if values else None

    out: dict[str, Any] = {name: mean(loaded, name) for name in UTIL_MEANS}
    out.update({f"{name}_decode": mean(decode, name) for name in UTIL_MEANS[:6]})
    out["cpu_pct"] = mean(loaded, "cpu_pct")
    out["rss_bytes_max"] = max((s["rss_bytes"] for s in measured), default=None)
    out["util_source"] = samples[0]["source"] if samples else None
    out.update(_trust(own, measured))
    out["energy_j"] = _energy(in_repeats, windows)
    out["energy_per_output_token_j"] = (out["energy_j"] / output_tokens
                                        if out["energy_j"] is not None and output_tokens else None)
    return out


def _trust(own: list[Sample], measured: list[Sample]) -> dict[str, Any]:
    """What the trust checks read (docs/trust.md): the SM clock's range and the clock event reasons NVML
    gave inside the measured repeats, and the most processes any of the point's GPUs held."""
    clocks = [s["sm_clock_mhz"] for s in measured if s.get("sm_clock_mhz") is not None]
    masks = [s["clock_reasons"] for s in measured if s.get("clock_reasons") is not None]
    reasons = clock_reason_names(functools.reduce(operator.or_, masks, 0))
    processes = [s["gpu_processes"] for s in own if s.get("gpu_processes") is not None]
    return {"sm_clock_mhz_min": min(clocks, default=None), "sm_clock_mhz_max": max(clocks, default=None),
            "clock_reasons": ",".join(reasons) if masks else None,
            "gpu_processes_max": max(processes, default=None)}


def _energy(in_repeats: list[Sample], windows: list[Window]) -> float | None:
    """Σ over repeats and GPUs of mean power × repeat length; None when any repeat has no power sample."""
    total = 0.0
    for window in windows:
        rows = [s for s in in_repeats if s["repeat"] == window.repeat and s["power_w"] is not None]
        if not rows:
            return None
        for gpu in {s.get("gpu_index") for s in rows}:
            power = statistics.fmean(s["power_w"] for s in rows if s.get("gpu_index") == gpu)
            total += power * (window.end - window.start)
    return total if windows else None
