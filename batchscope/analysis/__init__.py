"""Turns one run's point summaries into the answer: roofline per point, knee markers, working point.

`analyse()` is the single entry point the dashboard and `python -m batchscope report` use; the
modules behind it each hold one rule (knee, slo, noise, roofline, memory, working_point).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from runners.spec.refine import PLATEAU_GAIN

from batchscope.analysis.axis import BATCH, SweepAxis, axis_of, sweep_x
from batchscope.analysis.curve import excluded_notes, ok_curve, oom_ceiling
from batchscope.analysis.knee import kneedle, plateau
from batchscope.analysis.marker import Marker, num
from batchscope.analysis.memory import memory_split, predict_memory, predict_memory_for_spec
from batchscope.analysis.model_facts import model_facts
from batchscope.analysis.roofline import ROOFLINE_COLUMNS, context_per_row, predicted_curve, ridge_batch, roofline_table
from batchscope.analysis.slo import SLO, slo_limit
from batchscope.analysis.verdicts import THROUGHPUT, assess, for_json
from batchscope.analysis.working_point import working_point

__all__ = ["SLO", "Analysis", "Marker", "SweepAxis", "analyse", "memory_split", "model_facts", "predict_memory",
           "predict_memory_for_spec", "predicted_curve", "ridge_batch"]


@dataclass
class Analysis:
    """Everything the Run page and the report show about one run; markers are None when absent."""

    table: pd.DataFrame
    plateau: Marker | None
    kneedle: Marker | None
    slo_limit: Marker | None
    working_point: Marker | None
    ridge_batch: float | None
    notes: list[str] = field(default_factory=list)
    slo: SLO | None = None
    plateau_gain: float = PLATEAU_GAIN
    axis: SweepAxis = BATCH

    def markers(self) -> dict[str, Marker | None]:
        return {"plateau": self.plateau, "kneedle": self.kneedle, "slo_limit": self.slo_limit,
                "working_point": self.working_point}

    def to_dict(self) -> dict:
        """JSON-ready: the table as records (NaN → null), markers as dicts, the settings used."""
        return {
            "settings": {"slo": None if self.slo is None else self.slo.to_dict(), "plateau_gain": self.plateau_gain,
                         "axis": self.axis.key},
            "markers": {k: None if m is None else m.to_dict() for k, m in self.markers().items()},
            "ridge_batch": self.ridge_batch,
            "notes": list(self.notes),
            "points": for_json(json.loads(self.table.to_json(orient="records"))),
        }


def analyse(points: pd.DataFrame, model: dict | None, calibration: dict | None, slo: SLO | None = None,
            plateau_gain: float = PLATEAU_GAIN, evidence: pd.DataFrame | None = None) -> Analysis:
    """Analyse one run's points (the summary columns, status ok|oom|error) against its model and ceilings.

    The rules run along the run's own axis (batch size, or a continuous sweep's max_num_seqs,
    concurrency or arrival rate); the table gains that axis as column `x`, and each point's trust
    verdict per metric (`trust_metrics`, `trust_<metric>`, see analysis.verdicts) from its summary and
    `evidence` (Store.point_evidence), and `trust`/`trust_sentence` over the metrics the working point
    reads: throughput, and the SLO's latency percentile when there is an SLO.
    """
    reads = [THROUGHPUT] + ([f"{slo.metric}_p{slo.percentile}"] if slo else [])
    points = points.assign(**assess(points, evidence, reads))
    axis = axis_of(points)
    notes = excluded_notes(points, axis)
    curve = ok_curve(points)
    table, ridge = _roofline(points, curve, model, calibration, notes, axis)
    ceiling = oom_ceiling(points, curve)
    plateau_call = plateau(curve, plateau_gain, axis, ceiling)
    notes += plateau_call.notes
    knee = kneedle(curve, axis)
    if knee is None:
        notes.append(f"Kneedle finds no knee in throughput vs log2({axis.noun}): "
                     + ("it needs at least three ok points." if len(curve) < 3 else
                        f"no bend stands out from the straight line between the smallest and largest {axis.noun}."))
    limit = None
    if slo is not None:
        slo_call = slo_limit(curve, slo, axis)
        limit = slo_call.marker
        notes += slo_call.notes
    recommended, wp_notes = working_point(curve, plateau_call, slo, axis, ceiling)
    notes += wp_notes
    table = table.assign(x=sweep_x(table)).sort_values("x").reset_index(drop=True)
    return Analysis(table=table, plateau=plateau_call.marker, kneedle=knee, slo_limit=limit,
                    working_point=recommended, ridge_batch=ridge, notes=notes, slo=slo,
                    plateau_gain=plateau_gain, axis=axis)


def _roofline(points: pd.DataFrame, curve: pd.DataFrame, model: dict | None, calibration: dict | None,
              notes: list[str], axis: SweepAxis) -> tuple[pd.DataFrame, float | None]:
    """The table with roofline columns (NaN without model facts or ceilings) and the ridge batch."""
    if not axis.is_batch_limit:
        notes.append(f"No roofline along {axis.noun}: every point runs the same batch limit, so the load, "
                     f"not the batch, is what changes; the roofline belongs to batch-size sweeps.")
        return points.assign(**{c: np.nan for c in ROOFLINE_COLUMNS}), None
    if model is None or calibration is None:
        missing = " and ".join(n for n, v in (("model facts", model), ("calibration", calibration)) if v is None)
        notes.append(f"This run has no {missing}, so no roofline is drawn.")
        return points.assign(**{c: np.nan for c in ROOFLINE_COLUMNS}), None
    table = roofline_table(points, model, calibration)
    beaten = table[table["step_ratio"] < 1.0]
    if not beaten.empty:
        notes.append(f"At {', '.join(axis.at(x) for x in sweep_x(beaten))} the measured decode step is shorter than "
                     f"its roofline floor, which no step can be: the floor's inputs (the calibrated bandwidth, the "
                     f"rows and KV tokens the point records) do not describe the steps that were timed. A continuous "
                     f"run made before its decode step was taken over the load window reads so (docs/design.md, "
                     f"\"A continuous point's decode step\").")
    if axis.key != "batch_size":
        notes.append(f"Along {axis.noun} the roofline floors each point's decode step at its mean active rows; "
                     f"an online-serving point's throughput follows its arrivals, so none is predicted.")
    if curve.empty:
        return table, None
    context = float(context_per_row(curve).median())
    ridge = ridge_batch(model, calibration, context)
    if ridge is None:
        notes.append(f"No ridge batch: at {num(context)} cached tokens per row each added row costs more memory "
                     f"time (its KV) than compute time, so decode is memory-bound at every batch size.")
    else:
        notes.append(f"Ridge batch ≈ {num(ridge)} (at {num(context)} cached tokens per row): below it a decode "
                     f"step is limited by memory bandwidth, above it by compute.")
    return table, ridge
