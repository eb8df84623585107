"""Did this get slower? A run against an earlier run of the same configuration (docs/trust.md, regressions).

Two runs have the same configuration when they ran the same model, dtype, engine and workload on the same
GPU, driver and versions (CONFIG); the values swept may differ (a refined run adds points). A run is
flagged when its best throughput moved beyond noise — the best points' repeat spreads do not overlap and
the medians differ by more than NOISE_FLOOR — or when its working point moved, under the same SLO.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from batchscope.analysis import Analysis
from batchscope.units import tok_s
from batchscope.analysis.marker import pct
from batchscope.analysis.noise import describe_spread, spread
from runners.spec.registry import is_load_driven, schedules_slots

NOISE_FLOOR = 0.02  # a change smaller than this share of the baseline is noise, even between tight spreads
# (label, where in the stored run record): what must match for two runs to be compared
RUN_FIELDS = {"GPU": "gpu_name", "device": "device", "driver": "driver", "CUDA": "cuda", "torch": "torch_version",
              "transformers": "transformers_version", "engine version": "engine_version"}
SPEC_FIELDS = ("model", "dtype", "engine", "mode", "prompt_len", "output_len", "seed", "tensor_parallel", "replicas")
CONTINUOUS_FIELDS = ("max_num_seqs", "arrival", "concurrency", "num_requests", "max_num_batched_tokens",
                     "kv_cache_tokens")  # the load and scheduler of an online-serving run


def config(run: dict[str, Any]) -> dict[str, Any]:
    """The run's configuration by label: what it ran (its spec; the load only for an online-serving run)
    and on what."""
    spec = run.get("spec") or {}
    keys = SPEC_FIELDS + (CONTINUOUS_FIELDS if schedules_slots(spec.get("mode")) else ())
    found = {key: _hashable(spec.get(key)) for key in keys}
    found.update({label: run.get(column) for label, column in RUN_FIELDS.items()})
    if is_load_driven(spec.get("mode")):  # rated over the load window, or (made before it) over the wall
        env = run.get("env") or {}
        found["throughput basis"] = env.get("throughput_basis") or "wall"
        found["latency basis"] = env.get("latency_basis") or "every request"  # made before runners' loaded.counts
    return found


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """`dtype (bfloat16 vs fp8)` for each configuration field in which two runs differ."""
    ca, cb = config(a), config(b)
    return [f"{key} ({ca[key]} vs {cb[key]})" for key in ca if ca[key] != cb[key]]


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@dataclass
class Comparison:
    """A run against its baseline: what moved, in sentences, and whether that is beyond noise."""

    run_id: str
    baseline_id: str
    best_change: float | None  # (run − baseline) ÷ baseline of the best median throughput
    best_beyond_noise: bool
    working_point: tuple[float | None, float | None]  # (baseline's x, run's x)
    sentences: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    @property
    def flagged(self) -> bool:
        return self.best_beyond_noise or self.working_point[0] != self.working_point[1]

    @property
    def slower(self) -> bool:
        return self.best_beyond_noise and (self.best_change or 0.0) < 0

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "baseline": self.baseline_id, "best_change": self.best_change,
                "best_beyond_noise": self.best_beyond_noise, "working_point": list(self.working_point),
                "flagged": self.flagged, "sentences": self.sentences, "differences": self.differences}


def _best(analysis: Analysis) -> pd.Series | None:
    ok = analysis.table[analysis.table["status"] == "ok"]
    if ok.empty or ok["output_tokens_per_s"].isna().all():
        return None
    return ok.loc[ok["output_tokens_per_s"].idxmax()]


def compare(run: dict[str, Any], analysis: Analysis, baseline: dict[str, Any], base: Analysis) -> Comparison:
    """`run` against `baseline`, both analysed under the same SLO."""
    axis = analysis.axis
    now, then = _best(analysis), _best(base)
    sentences, change, beyond = [], None, False
    if now is not None and then is not None:
        change = float(now["output_tokens_per_s"] / then["output_tokens_per_s"] - 1.0)
        (low_a, high_a), (low_b, high_b) = spread(now), spread(then)
        overlap = max(low_a, low_b) <= min(high_a, high_b)
        beyond = not overlap and abs(change) > NOISE_FLOOR
        moved = "rose " + pct(change, 1) if change > 0 else "fell " + pct(-change, 1) if change < 0 else "held"
        judged = ("beyond noise: the repeat spreads do not overlap" if beyond else
                  "within noise: the repeat spreads overlap" if overlap else
                  f"within noise: under the {pct(NOISE_FLOOR)} floor")
        sentences.append(f"Best throughput {moved}, {tok_s(then['output_tokens_per_s'])} ({describe_spread(then)}) → "
                         f"{tok_s(now['output_tokens_per_s'])} ({describe_spread(now)}), {judged}.")
    was = base.working_point.x if base.working_point is not None else None
    is_ = analysis.working_point.x if analysis.working_point is not None else None
    if was != is_:
        shown = [axis.value(v) if v is not None else "none" for v in (was, is_)]
        under = "" if analysis.slo is None else f" under the {analysis.slo.name} ≤ {analysis.slo.ms:g} ms SLO"
        sentences.append(f"The working point moved from {shown[0]} to {shown[1]}{under}.")
    else:
        sentences.append("The working point did not move" + ("" if is_ is None else f" ({axis.at(is_)})") + ".")
    return Comparison(run["run_id"], baseline["run_id"], change, beyond, (was, is_), sentences,
                      differences(baseline, run))


def earlier_matches(runs: list[dict[str, Any]]) -> dict[str, str]:
    """For each finished run, the latest earlier finished run of the same configuration: run id → baseline id.
    `runs` are stored run records (Store.run) in any order; a run's time is its created_at."""
    done = sorted((r for r in runs if r.get("state") == "done" and r.get("created_at") is not None),
                  key=lambda r: r["created_at"])
    latest: dict[tuple, str] = {}
    pairs = {}
    for run in done:
        key = tuple((k, str(v)) for k, v in sorted(config(run).items()))
        if key in latest:
            pairs[run["run_id"]] = latest[key]
        latest[key] = run["run_id"]
    return pairs
