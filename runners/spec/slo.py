"""The latency SLO, one type for the runner and the app: refinement brackets its limit (runners.spec.refine),
the goodput SLO names its metric, and the app marks it, judges points against it (batchscope.analysis.slo)
and keeps it in a link (`ttft:95:500`). Torch-free and standard library only."""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from runners.spec.options import SpecError, figure

METRIC_NAMES = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E"}
SLO_METRICS = tuple(METRIC_NAMES)
PERCENTILES = (50, 95, 99)
MAX_LATENCY_MS = 86_400_000.0  # an SLO limit: a day


@dataclass(frozen=True)
class SLO:
    """A latency objective: the chosen percentile of TTFT, ITL or E2E must be ≤ `ms`."""

    metric: Literal["ttft", "itl", "e2e"]
    percentile: Literal[50, 95, 99]
    ms: float

    def __post_init__(self) -> None:
        if self.metric not in METRIC_NAMES:
            raise ValueError(f"SLO metric must be one of {', '.join(METRIC_NAMES)}, not {self.metric!r}")
        if self.percentile not in PERCENTILES:
            raise ValueError(f"SLO percentile must be 50, 95 or 99, not {self.percentile!r}")
        if not self.ms > 0:
            raise ValueError(f"SLO must be a positive number of ms, not {self.ms!r}")

    @property
    def column(self) -> str:
        """The point summary column it reads, e.g. `e2e_ms_p95`."""
        return f"{self.metric}_ms_p{self.percentile}"

    @property
    def name(self) -> str:
        """ "P95 E2E", as the sentences print it."""
        return f"P{self.percentile} {METRIC_NAMES[self.metric]}"

    @property
    def rule(self) -> str:
        """ "P95 E2E ≤ 1000 ms": the whole objective in one phrase."""
        return f"{self.name} ≤ {self.ms:g} ms"

    @property
    def text(self) -> str:
        """As a URL and the refine_slo option write it: `ttft:95:500`."""
        return f"{self.metric}:{self.percentile}:{self.ms:g}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def latency_falls(latencies: Iterable[float | None]) -> bool:
    """Whether an SLO's latency falls along a sweep's axis (the points in axis order): the last known value
    below the first, the sign of the sum of the steps. It grows with batch size, concurrency or arrival rate;
    along max_num_seqs at a fixed rate it falls (more slots, less queueing).

    The size of the steps decides, not how many go each way: a cliff of +500 ms between two flat stretches that
    each dip by a millisecond of noise still grows (a count of steps read it as falling, and put the SLO limit at
    the smallest point that meets it)."""
    known = [v for v in latencies if v is not None and not math.isnan(v)]
    return len(known) > 1 and known[-1] < known[0]


def parse_slo(text: str, name: str = "refine_slo") -> SLO:
    """`ttft:95:1000` → SLO; SpecError under option `name` when it is not one."""
    parts = str(text).strip().split(":")
    if len(parts) != 3:
        raise SpecError(name, f"{name} must be METRIC:PERCENTILE:MS, e.g. ttft:95:1000: {text!r}")
    metric, percentile, ms = parts
    if metric not in SLO_METRICS:
        raise SpecError(name, f"the metric must be one of {', '.join(SLO_METRICS)}: {metric!r}")
    if percentile not in {str(p) for p in PERCENTILES}:
        raise SpecError(name, f"the percentile must be 50, 95 or 99: {percentile!r}")
    try:
        limit = float(ms)
    except ValueError:
        raise SpecError(name, f"the limit must be milliseconds: {ms!r}") from None
    if not 0 < limit <= MAX_LATENCY_MS:  # NaN and infinity too
        raise SpecError(name, f"the limit must be a positive number of milliseconds, at most "
                              f"{figure(MAX_LATENCY_MS)}: {ms!r}")
    return SLO(metric, int(percentile), limit)  # type: ignore[arg-type]  (checked above)
