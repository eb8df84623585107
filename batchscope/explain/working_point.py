"""Explain step 6, the working point under a latency SLO: which batches meet it, and what the working
point costs against the best throughput."""
from __future__ import annotations

import pandas as pd

from batchscope.analysis import SLO, Analysis
from batchscope.analysis.marker import num, pct
from batchscope.explain.words import measured, value
from batchscope.units import ms, tok_s

def working_point_sentences(table: pd.DataFrame, analysis: Analysis | None, slo: SLO | None) -> tuple[str, str]:
    """Which batches meet the SLO, then the working point and what it costs against the best throughput."""
    return slo_sentence(table, analysis, slo), working_point_sentence(table, analysis, slo)


def slo_sentence(table: pd.DataFrame, analysis: Analysis | None, slo: SLO | None) -> str:
    if slo is None:
        return "No latency SLO is set, so every batch is allowed on latency."
    curve = measured(table, slo.column)
    if curve.empty:
        return f"This run recorded no {slo.name} latency, so the {num(slo.ms)} ms SLO cannot be checked."
    meets = curve[slo.column] <= slo.ms
    first, last = curve.iloc[0], curve.iloc[-1]
    if not meets.any():
        return (f"No batch meets a {slo.name} SLO of {num(slo.ms)} ms: even batch {int(first['batch_size'])} "
                f"takes {ms(first[slo.column])}.")
    limit = int(analysis.slo_limit.x) if analysis is not None and analysis.slo_limit is not None \
        else int(curve.loc[meets, "batch_size"].max())
    here = curve[curve["batch_size"] == limit].iloc[0]
    beyond = curve[curve["batch_size"] > limit]
    if beyond.empty:
        return (f"Every measured batch meets a {slo.name} SLO of {num(slo.ms)} ms, up to batch "
                f"{int(last['batch_size'])} at {ms(last[slo.column])}.")
    nxt = beyond.iloc[0]
    return (f"Under a {slo.name} SLO of {num(slo.ms)} ms, batch {limit} is the largest that meets it "
            f"({ms(here[slo.column])}); batch {int(nxt['batch_size'])} takes {ms(nxt[slo.column])}.")


def working_point_sentence(table: pd.DataFrame, analysis: Analysis | None, slo: SLO | None) -> str:
    curve = measured(table, "output_tokens_per_s")
    marker = analysis.working_point if analysis is not None else None
    if curve.empty or marker is None:
        within = f" meets the {num(slo.ms)} ms {slo.name} SLO" if slo is not None else " finished"
        return f"So there is no working point: no batch at or before the plateau{within}."
    row = curve[curve["batch_size"] == int(marker.x)]
    if row.empty:
        return f"The working point is batch {int(marker.x)}, but its throughput was not recorded."
    best = curve.loc[curve["output_tokens_per_s"].idxmax()]
    t, tb = float(row.iloc[0]["output_tokens_per_s"]), float(best["output_tokens_per_s"])
    latency = ""
    if slo is not None and value(row.iloc[0], slo.column) is not None:
        latency = f" at {ms(row.iloc[0][slo.column])} {slo.name}"
    share = ("the best measured" if int(marker.x) == int(best["batch_size"])
             else f"{pct(t / tb)} of the best measured ({tok_s(tb)} at batch {int(best['batch_size'])})")
    plateau = int(analysis.plateau.x) if analysis.plateau is not None else None
    larger = curve[curve["batch_size"] > int(marker.x)]
    blocked = slo is not None and not larger.empty and (measured(larger, slo.column)[slo.column] > slo.ms).any()
    limited_by = ""
    if blocked and (plateau is None or plateau > int(marker.x)):
        limited_by = "; the SLO, not throughput, sets it"
    elif plateau == int(marker.x):
        limited_by = "; past it throughput stops paying"
    elif larger.empty:
        limited_by = "; it is the largest batch measured"
    return f"The working point is batch {int(marker.x)}: {tok_s(t)}{latency}, {share}{limited_by}."
