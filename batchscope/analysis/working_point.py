"""The recommended batch: the largest at or before the plateau that is within the SLO."""
from __future__ import annotations

import pandas as pd

from batchscope.analysis.curve import tok_s
from batchscope.analysis.knee import PlateauCall
from batchscope.analysis.marker import Marker, num
from batchscope.analysis.slo import SLO


def working_point(curve: pd.DataFrame, plateau: PlateauCall, slo: SLO | None) -> tuple[Marker | None, list[str]]:
    """(marker, notes). Without a plateau the throughput bound is lifted; without an SLO, the latency one.

    When noise leaves the plateau undecided, `plateau.limit` is the latest batch it can start at
    and that is the bound (see `knee.plateau`).
    """
    if curve.empty:
        return None, ["No ok point, so there is no working point."]
    allowed = pd.Series(True, index=curve.index)
    if plateau.limit is not None:
        allowed &= curve["batch_size"] <= plateau.limit
    if slo is not None:
        allowed &= slo.meets(curve) if slo.column in curve.columns else False
    if not allowed.any():
        return None, [f"No working point: no batch at or before the plateau meets the {num(slo.ms)} ms "
                      f"{slo.name} SLO."]
    point = curve.loc[allowed[allowed].index.max()]
    b = int(point["batch_size"])
    return Marker(b, "working point", _why(point, b, curve, plateau, slo)), []


def _why(point: pd.Series, b: int, curve: pd.DataFrame, plateau: PlateauCall, slo: SLO | None) -> str:
    throughput = tok_s(point["output_tokens_per_s"])
    latency = "" if slo is None else (f" and its {slo.name} latency ({num(point[slo.column])} ms) meets the "
                                      f"{num(slo.ms)} ms SLO")
    if plateau.limit == b and plateau.marker is not None:
        return f"Batch {b} is recommended: throughput plateaus there ({throughput}){latency}."
    if plateau.limit == b:
        return (f"Batch {b} is recommended: it is the latest batch the plateau can start at, which noise "
                f"leaves undecided ({throughput}){latency}.")
    if plateau.limit is not None:
        blocked = curve[curve["batch_size"] == plateau.limit].iloc[0]
        return (f"Batch {b} is recommended: it is the largest batch within the {num(slo.ms)} ms {slo.name} SLO "
                f"({num(point[slo.column])} ms, {throughput}); the plateau at {plateau.limit} would take "
                f"{num(blocked[slo.column])} ms.")
    if slo is not None:
        return (f"Batch {b} is recommended: throughput has not plateaued, and {b} is the largest batch whose "
                f"{slo.name} latency ({num(point[slo.column])} ms) meets the {num(slo.ms)} ms SLO "
                f"({throughput}).")
    return (f"Batch {b} is recommended only because it is the largest measured ({throughput}): throughput "
            f"is still rising, so try larger batches or set a latency SLO.")
