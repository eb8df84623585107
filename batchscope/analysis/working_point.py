"""The recommended batch (or rate, …): the largest at or before the plateau that is within the SLO."""
from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from batchscope.analysis.axis import BATCH, SweepAxis
from batchscope.units import tok_s
from batchscope.analysis.knee import PlateauCall
from batchscope.analysis.marker import Marker, num
from batchscope.analysis.slo import SLO, along, direction, meets


def working_point(curve: pd.DataFrame, plateau: PlateauCall, slo: SLO | None,
                  axis: SweepAxis = BATCH, ceiling: float | None = None) -> tuple[Marker | None, list[str]]:
    """(marker, notes). Without a plateau the throughput bound is lifted; without an SLO, the latency one.

    When noise leaves the plateau undecided, `plateau.limit` is the latest batch it can start at
    and that is the bound (see `knee.plateau`). `ceiling` (the x that ran out of memory past the last
    ok point) is named instead of advice to try larger batches. Where latency falls along the axis
    (max_num_seqs at a fixed rate) the rule turns round: see `_falling`. A point whose verdict on the
    metrics the rule reads is untrusted (`trust`, analysis.verdicts) is passed over for the best trusted
    one that qualifies, and the sentence says so; when none is trusted, the rule's pick stands and its
    sentence says it is untrusted.
    """
    if curve.empty:
        return None, ["No ok point, so there is no working point."]
    if slo is not None and slo.column in curve.columns and direction(curve, slo) == "falls":
        return _falling(curve, plateau, slo, axis)
    allowed = pd.Series(True, index=curve.index)
    if plateau.limit is not None:
        allowed &= curve["x"] <= plateau.limit
    if slo is not None:
        allowed &= meets(slo, curve) if slo.column in curve.columns else False
    if not allowed.any():
        return None, [f"No working point: no {axis.noun} at or before the plateau meets the {num(slo.ms)} ms "
                      f"{slo.name} SLO."]
    return _trusted(curve, allowed, "largest", lambda point: _why(point, point["x"], curve, plateau, slo, axis,
                                                                  ceiling), axis), []


def _falling(curve: pd.DataFrame, plateau: PlateauCall, slo: SLO, axis: SweepAxis) -> tuple[Marker | None, list[str]]:
    """Latency falls along the axis, so every value past the SLO limit meets it: the smallest that meets
    it at or past the plateau's start (more adds no throughput, only memory); with no plateau, or none
    past it meeting the SLO, the largest that meets it (the most throughput within the SLO)."""
    met = meets(slo, curve)
    if not met.any():
        return None, [f"No working point: no {axis.noun} meets the {num(slo.ms)} ms {slo.name} SLO, although "
                      f"{along(axis, 'falls')}."]
    past = met & (curve["x"] >= plateau.limit) if plateau.limit is not None else met & False
    allowed, prefer = (past, "smallest") if past.any() else (met, "largest")

    def why(point: pd.Series) -> str:
        reason = (f"the smallest {axis.noun} at or past the plateau's start ({axis.value(plateau.limit)}) whose "
                  if prefer == "smallest" else f"the largest {axis.noun} whose ")
        return (f"{axis.at_start(point['x'])} is recommended: {along(axis, 'falls')} here, so it is {reason}"
                f"{slo.name} latency ({num(point[slo.column])} ms) meets the {num(slo.ms)} ms SLO "
                f"({tok_s(point['output_tokens_per_s'])}).")
    return _trusted(curve, allowed, prefer, why, axis), []


def _trusted(curve: pd.DataFrame, allowed: pd.Series, prefer: str, why: Callable[[pd.Series], str],
             axis: SweepAxis) -> Marker:
    """The `prefer` (largest or smallest) allowed point, or, when its verdict is untrusted, the same pick
    among the trusted ones, naming the untrusted one and why."""
    pick = allowed[allowed].index.max() if prefer == "largest" else allowed[allowed].index.min()
    point = curve.loc[pick]
    if point.get("trust") != "untrusted":
        return Marker(point["x"], "working point", why(point))
    trusted = allowed & curve["trust"].ne("untrusted")
    if not trusted.any():
        return Marker(point["x"], "working point", f"{why(point)} Its measurement is untrusted, and no trusted "
                                                   f"{axis.noun} qualifies: {point['trust_sentence']}")
    safe = curve.loc[trusted[trusted].index.max() if prefer == "largest" else trusted[trusted].index.min()]
    return Marker(safe["x"], "working point", (
        f"{axis.at_start(safe['x'])} is recommended ({tok_s(safe['output_tokens_per_s'])}): {axis.at(point['x'])} "
        f"qualifies but its measurement is untrusted ({point['trust_sentence'].rstrip('.')}), and "
        f"{axis.value(safe['x'])} is the {prefer} trusted {axis.noun} that qualifies."))


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
