"""The latency SLO on a measured curve: which points meet it and the largest batch (or rate, …) that does.
The SLO type itself is the runner's (runners.spec.slo), so refinement and the app read one objective."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from batchscope.analysis.axis import BATCH, SweepAxis
from batchscope.analysis.marker import Marker, num
from runners.spec.slo import METRIC_NAMES, SLO, latency_falls

__all__ = ["METRIC_NAMES", "SLO", "SLOCall", "along", "direction", "meets", "slo_limit"]



def meets(slo: SLO, curve: pd.DataFrame) -> pd.Series:
    """Per point: True when its latency is ≤ the SLO (a missing latency never meets it)."""
    return curve[slo.column].le(slo.ms).fillna(False).astype(bool)


@dataclass(frozen=True)
class SLOCall:
    marker: Marker | None
    notes: list[str] = field(default_factory=list)


def direction(curve: pd.DataFrame, slo: SLO) -> str:
    """ "grows" or "falls": which way the SLO's latency goes along the axis (runners.spec.slo.latency_falls,
    the rule refinement brackets by too)."""
    latencies = curve[slo.column].dropna().tolist() if slo.column in curve else []
    return "falls" if latency_falls(latencies) else "grows"


def along(axis: SweepAxis, way: str) -> str:
    """ "latency grows along batch", said once in each sentence that depends on it."""
    return f"latency {way} along {axis.noun}"


def slo_limit(curve: pd.DataFrame, slo: SLO, axis: SweepAxis = BATCH) -> SLOCall:
    """Where the SLO stops being met, with one sentence why: the largest ok x that meets it when latency
    grows along the axis, the smallest when it falls."""
    if slo.column not in curve.columns or curve[slo.column].isna().all():
        return SLOCall(None, [f"No point reports {slo.name} latency ({slo.column}), so the SLO cannot be checked."])
    met = meets(slo, curve)
    way = direction(curve, slo)
    grows = way == "grows"
    if not met.any():
        best = curve.iloc[0 if grows else -1]
        return SLOCall(None, [f"No {axis.noun} meets the {num(slo.ms)} ms {slo.name} SLO ({along(axis, way)}): even "
                              f"the {'smallest' if grows else 'largest'}, {axis.at(best['x'])}, takes "
                              f"{num(best[slo.column])} ms."])
    limit_index = int(met[met].index.max() if grows else met[met].index.min())
    point = curve.iloc[limit_index]
    x = point["x"]
    edge = len(curve) - 1 if grows else 0
    word, beyond = ("largest", limit_index + 1) if grows else ("smallest", limit_index - 1)
    if limit_index == edge:
        sentence = (f"Every measured {axis.noun} meets the {num(slo.ms)} ms {slo.name} SLO, "
                    f"{'up to the largest' if grows else 'down to the smallest'}, {axis.at(x)} "
                    f"({num(point[slo.column])} ms; {along(axis, way)}), so the SLO limit is at "
                    f"{'least' if grows else 'most'} {axis.value(x)}.")
    else:
        nxt = curve.iloc[beyond]
        sentence = (f"{axis.at_start(x)} is the {word} whose {slo.name} latency ({num(point[slo.column])} ms) "
                    f"meets the {num(slo.ms)} ms SLO; {axis.at(nxt['x'])} takes {num(nxt[slo.column])} ms "
                    f"({along(axis, way)}).")
    notes = []
    inside = curve.index < limit_index if grows else curve.index > limit_index
    missed = curve["x"][~met & inside].tolist()
    if missed:
        notes.append(f"{'Smaller' if grows else 'Larger'} {axis.some} {', '.join(map(axis.value, missed))} miss the "
                     f"SLO although {axis.at(x)} meets it: latency is not monotone here, so check the repeats.")
    return SLOCall(Marker(x, "SLO limit", sentence), notes)
