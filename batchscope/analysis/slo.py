"""The latency SLO: which column it reads and the largest batch (or rate, …) that meets it."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

import pandas as pd

from batchscope.analysis.axis import BATCH, SweepAxis
from batchscope.analysis.marker import Marker, num

METRIC_NAMES = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E"}


@dataclass(frozen=True)
class SLO:
    """A latency objective: the chosen percentile of TTFT, ITL or E2E must be ≤ `ms`."""

    metric: Literal["ttft", "itl", "e2e"]
    percentile: Literal[50, 95, 99]
    ms: float

    def __post_init__(self) -> None:
        if self.metric not in METRIC_NAMES:
            raise ValueError(f"SLO metric must be one of {', '.join(METRIC_NAMES)}, not {self.metric!r}")
        if self.percentile not in (50, 95, 99):
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

    def meets(self, curve: pd.DataFrame) -> pd.Series:
        """Per point: True when its latency is ≤ the SLO (a missing latency never meets it)."""
        return curve[self.column].le(self.ms).fillna(False).astype(bool)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SLOCall:
    marker: Marker | None
    notes: list[str] = field(default_factory=list)


def slo_limit(curve: pd.DataFrame, slo: SLO, axis: SweepAxis = BATCH) -> SLOCall:
    """The largest ok x whose chosen latency percentile meets the SLO, with one sentence why."""
    if slo.column not in curve.columns or curve[slo.column].isna().all():
        return SLOCall(None, [f"No point reports {slo.name} latency ({slo.column}), so the SLO cannot be checked."])
    meets = slo.meets(curve)
    if not meets.any():
        first = curve.iloc[0]
        return SLOCall(None, [f"No {axis.noun} meets the {num(slo.ms)} ms {slo.name} SLO: even the smallest, "
                              f"{axis.at(first['x'])}, takes {num(first[slo.column])} ms."])
    limit_index = int(meets[meets].index.max())
    point = curve.iloc[limit_index]
    x = point["x"]
    if limit_index == len(curve) - 1:
        sentence = (f"Every measured {axis.noun} meets the {num(slo.ms)} ms {slo.name} SLO, up to the largest, "
                    f"{axis.at(x)} ({num(point[slo.column])} ms), so the SLO limit is at least {axis.value(x)}.")
    else:
        nxt = curve.iloc[limit_index + 1]
        sentence = (f"{axis.at_start(x)} is the largest whose {slo.name} latency ({num(point[slo.column])} ms) "
                    f"meets the {num(slo.ms)} ms SLO; {axis.at(nxt['x'])} takes {num(nxt[slo.column])} ms.")
    notes = []
    missed_below = curve["x"][~meets & (curve.index < limit_index)].tolist()
    if missed_below:
        notes.append(f"Smaller {axis.some} {', '.join(map(axis.value, missed_below))} miss the SLO although "
                     f"{axis.at(x)} meets it: latency is not monotone here, so check the repeats.")
    return SLOCall(Marker(x, "SLO limit", sentence), notes)
