"""The recommended batch (or rate, …): the largest at or before the plateau that is within the SLO."""
from __future__ import annotations

import pandas as pd

from batchscope.analysis.axis import BATCH, SweepAxis
from batchscope.analysis.curve import tok_s
from batchscope.analysis.knee import PlateauCall
from batchscope.analysis.marker import Marker, num
from batchscope.analysis.slo import SLO


def working_point(curve: pd.DataFrame, plateau: PlateauCall, slo: SLO | None,
                  axis: SweepAxis = BATCH, ceiling: float | None = None) -> tuple[Marker | None, list[str]]:
    """(marker, notes). Without a plateau the throughput bound is lifted; without an SLO, the latency one.

    When noise leaves the plateau undecided, `plateau.limit` is the latest batch it can start at
    and that is the bound (see `knee.plateau`). `ceiling` (the x that ran out of memory past the last
    ok point) is named instead of advice to try larger batches. An untrusted point (analysis.trust) is
    passed over for the largest trusted one that qualifies, and the sentence says so; when none is
    trusted, the rule's pick stands and its sentence says it is untrusted.
    """
    if curve.empty:
        return None, ["No ok point, so there is no working point."]
    allowed = pd.Series(True, index=curve.index)
    if plateau.limit is not None:
        allowed &= curve["x"] <= plateau.limit
    if slo is not None:
        allowed &= slo.meets(curve) if slo.column in curve.columns else False
    if not allowed.any():
        return None, [f"No working point: no {axis.noun} at or before the plateau meets the {num(slo.ms)} ms "
                      f"{slo.name} SLO."]
    point = curve.loc[allowed[allowed].index.max()]
    x = point["x"]
    if point.get("trust") != "untrusted":
        return Marker(x, "working point", _why(point, x, curve, plateau, slo, axis, ceiling)), []
    trusted = allowed & curve["trust"].ne("untrusted")
    if not trusted.any():
        why = _why(point, x, curve, plateau, slo, axis, ceiling)
        return Marker(x, "working point", f"{why} Its measurement is untrusted, and no trusted {axis.noun} "
                                          f"qualifies: {point['trust_sentence']}"), []
    safe = curve.loc[trusted[trusted].index.max()]
    return Marker(safe["x"], "working point", (
        f"{axis.at_start(safe['x'])} is recommended ({tok_s(safe['output_tokens_per_s'])}): {axis.at(x)} qualifies "
        f"but its measurement is untrusted ({point['trust_sentence'].rstrip('.')}), and {axis.value(safe['x'])} is "
        f"the largest trusted {axis.noun} at or before it.")), []


def _why(point: pd.Series, x: float, curve: pd.DataFrame, plateau: PlateauCall, slo: SLO | None,
         axis: SweepAxis, ceiling: float | None) -> str:
    here = axis.at_start(x)
    throughput = tok_s(point["output_tokens_per_s"])
    latency = "" if slo is None else (f" and its {slo.name} latency ({num(point[slo.column])} ms) meets the "
                                      f"{num(slo.ms)} ms SLO")
    if plateau.limit == x and plateau.marker is not None:
        return f"{here} is recommended: throughput plateaus there ({throughput}){latency}."
    if plateau.limit == x:
        return (f"{here} is recommended: it is the latest {axis.noun} the plateau can start at, which noise "
                f"leaves undecided ({throughput}){latency}.")
    if plateau.limit is not None:
        blocked = curve[curve["x"] == plateau.limit].iloc[0]
        return (f"{here} is recommended: it is the largest {axis.noun} within the {num(slo.ms)} ms {slo.name} "
                f"SLO ({num(point[slo.column])} ms, {throughput}); the plateau at {axis.value(plateau.limit)} "
                f"would take {num(blocked[slo.column])} ms.")
    if slo is not None:
        return (f"{here} is recommended: throughput has not plateaued, and {axis.value(x)} is the largest "
                f"{axis.noun} whose {slo.name} latency ({num(point[slo.column])} ms) meets the {num(slo.ms)} ms "
                f"SLO ({throughput}).")
    if len(curve) == 1:
        beyond = f"; {axis.at(ceiling)} ran out of memory" if ceiling is not None else ""
        return (f"{here} is the only {axis.noun} that finished ({throughput}), so it is the working point by "
                f"default: with nothing to compare it with, no rise or plateau can be read{beyond}.")
    if ceiling is not None:
        return (f"{here} is recommended: it is the largest that fits in memory ({axis.at(ceiling)} ran out), "
                f"and throughput was still rising up to it ({throughput}); set a latency SLO to trade some "
                f"of it for latency.")
    return (f"{here} is recommended only because it is the largest measured ({throughput}): throughput "
            f"is still rising, so try {axis.larger} or set a latency SLO.")
