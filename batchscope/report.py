"""`python -m batchscope report RUN_ID`: one run's points, roofline, knee markers and working point.

Prints Markdown for a person or JSON for a script, from the same `analysis.analyse()` the dashboard
draws, so the two never disagree.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from batchscope import config
from batchscope.analysis import SLO, Analysis, analyse
from batchscope.analysis.axis import BATCH, SweepAxis
from batchscope.analysis.cost import at_working_point, device_type, parse_price, setting_key, with_cost
from batchscope.analysis.marker import num, pct
from batchscope.analysis.model_facts import quant_note
from batchscope.analysis.regression import Comparison, compare
from batchscope.analysis.verdicts import for_json
from batchscope.endpoint_text import endpoint_lines
from batchscope.metric_catalogue import METRICS, header
from batchscope.store import Store
from batchscope.store_file import StoreUnavailableError
from batchscope.units import GiB
from runners.spec.refine import PLATEAU_GAIN

EXIT_USAGE = 2


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m batchscope report", allow_abbrev=False,
                                     description="Knee, SLO working point and roofline for one stored run.")
    parser.add_argument("run_id")
    parser.add_argument("--db", type=Path, default=None, help="history DB (default: $BATCHSCOPE_DB or data/)")
    parser.add_argument("--slo-metric", choices=["e2e", "ttft", "itl"], default=None)
    parser.add_argument("--slo-pct", type=int, choices=[50, 95, 99], default=None)
    parser.add_argument("--slo-ms", type=float, default=None, help="latency objective in ms; no SLO without it")
    parser.add_argument("--plateau-gain", type=float, default=PLATEAU_GAIN,
                        help="a doubling that adds less than this share of throughput is on the plateau")
    parser.add_argument("--format", choices=["md", "json"], default="md")
    parser.add_argument("--baseline", metavar="OTHER_RUN_ID", default=None,
                        help="compare with an earlier run: best throughput beyond noise, working point moved")
    parser.add_argument("--gpu-hour-price", type=float, default=None, metavar="PRICE",
                        help="price per GPU-hour for cost per 1M output tokens (default: the price the app "
                             "stores for this run's GPU type, if any)")
    args = parser.parse_args(argv)
    if args.gpu_hour_price is not None:
        try:
            parse_price(str(args.gpu_hour_price))
        except ValueError as err:
            parser.error(str(err))
    if args.slo_ms is None and (args.slo_metric or args.slo_pct):
        parser.error("--slo-metric and --slo-pct need --slo-ms")
    if args.slo_ms is not None and not args.slo_ms > 0:
        parser.error("--slo-ms must be a positive number of milliseconds")
    if not 0 < args.plateau_gain < 10:
        parser.error("--plateau-gain is a fraction such as 0.10")
    return args


def main(argv: list[str]) -> int:
    """Run the report for argv (the arguments after `report`); 0 on success, 2 for bad input."""
    args = parse_args(argv)
    db = args.db or config.db_path()
    if not db.is_file():
        print(f"No history database at {db}; pass --db or ingest a run first.", file=sys.stderr)
        return EXIT_USAGE
    slo = None if args.slo_ms is None else SLO(args.slo_metric or "e2e", args.slo_pct or 95, args.slo_ms)
    try:
        with Store(db) as store:
            loaded = {}
            for run_id in filter(None, (args.run_id, args.baseline)):
                if store.run(run_id) is None:
                    print(f"Unknown run id {run_id!r} in {db}.", file=sys.stderr)
                    return EXIT_USAGE
                loaded[run_id] = analysed_run(store, run_id, slo, args.plateau_gain)
            run, analysis = loaded[args.run_id]
            price = args.gpu_hour_price
            if price is None:
                try:
                    price = parse_price(store.setting(setting_key(device_type(run))))
                except ValueError:
                    price = None  # a bad stored price is the app's to report; the report goes without cost
    except (duckdb.IOException, StoreUnavailableError) as err:
        print(f"Cannot open {db}: {err}", file=sys.stderr)
        return 1
    versus = None
    if args.baseline is not None:
        baseline, base = loaded[args.baseline]
        versus = compare(run, analysis, baseline, base)
    report = Report(run, analysis, price, versus)
    print(to_json(report) if args.format == "json" else to_markdown(report))
    return 0


def analysed_run(store: Store, run_id: str, slo: SLO | None, plateau_gain: float) -> tuple[dict, Analysis]:
    """A stored run and its analysis (with each point's trust verdict) under `slo`."""
    run = store.run(run_id)
    calibration = run.get("calibration") or _cached_calibration(store, run)
    return run, analyse(store.points([run_id]), run.get("model"), calibration, slo, plateau_gain,
                        evidence=store.point_evidence(run_id))


@dataclass
class Report:
    """What one report says: the run and its analysis, the price per GPU-hour it was costed at (None:
    no cost) and the comparison with a baseline run (None: none asked for)."""

    run: dict
    analysis: Analysis
    price: float | None = None
    versus: Comparison | None = None


def _cached_calibration(store: Store, run: dict) -> dict | None:
    """The ceilings stored for this run's GPU + driver + dtype by another run, when it has none."""
    if not run.get("gpu_name"):
        return None
    return store.calibration(f"{run['gpu_name']}|{run.get('driver') or '-'}|{run.get('dtype')}")


def run_header(run: dict) -> dict:
    """The run facts a reader needs to judge the numbers: what ran, on what, in which state."""
    keys = ("run_id", "name", "dtype", "engine", "mode", "state", "gpu_name", "fingerprint")
    model = run.get("model")  # the store puts model.json here; the spec keeps the name the user chose
    name = (run.get("spec") or {}).get("model") or (model.get("name") if isinstance(model, dict) else model)
    return {"model": name, **{k: run.get(k) for k in keys}}


def to_json(report: Report) -> str:
    run, analysis = report.run, report.analysis
    found = analysis.to_dict()
    found["points"] = for_json(json.loads(with_cost(analysis.table, report.price).to_json(orient="records")))
    return json.dumps({"run": run_header(run), "calibration": run.get("calibration"), **found,
                       "gpu_hour_price": report.price,
                       "working_point_cost": at_working_point(analysis.table, analysis.working_point, report.price),
                       "baseline": None if report.versus is None else report.versus.to_dict()},
                      indent=2, default=str)


def to_markdown(report: Report) -> str:
    """A title, the markers with their sentences, the working point's cost, the notes, the comparison with a
    baseline, then one table row per point."""
    return "\n".join(head_lines(report) + body_lines(report))


def head_lines(report: Report) -> list[str]:
    """The report's title and what a reader needs before any number: what ran, on what, the SLO (the exported
    HTML report puts its charts between this and `body_lines`)."""
    run, analysis = report.run, report.analysis
    head = run_header(run)
    lines = [f"# {head['name'] or head['run_id']} ({head['run_id']})", "",
             f"{head['model']} · {head['dtype']} · {head['engine']} · {head['gpu_name'] or 'unknown device'} · "
             f"{head['state']}", ""]
    if head["fingerprint"]:
        lines += [f"Environment: {head['fingerprint']}", ""]
    endpoint = endpoint_lines(run.get("env"))
    if endpoint:
        lines += [" ".join(endpoint), ""]
    guard = quant_note(run.get("model"))
    if guard:
        lines += [f"Accuracy guard: {guard}", ""]
    slo = analysis.slo
    return lines + [f"Plateau gain threshold: {pct(analysis.plateau_gain)} per doubling. SLO: "
                    + ("none" if slo is None else f"{slo.name} ≤ {num(slo.ms)} ms") + ".", ""]


def body_lines(report: Report) -> list[str]:
    """The markers with their sentences, the working point's cost, the notes, the baseline, every point."""
    analysis = report.analysis
    slo = analysis.slo
    lines = ["## Markers", ""]
    for name, marker in analysis.markers().items():
        title = name.replace("_", " ")
        lines.append(f"- **{title}**: " + ("none" if marker is None else f"{analysis.axis.at(marker.x)}. {marker.sentence}"))
    ridge = ("n/a (not a batch-size sweep)" if not analysis.axis.is_batch_limit
             else "none (memory-bound at every batch)" if analysis.ridge_batch is None
             else f"≈ {num(analysis.ridge_batch)}")
    lines += [f"- **ridge batch**: {ridge}", ""]
    cost = at_working_point(analysis.table, analysis.working_point, report.price)
    if cost:
        lines += [cost, ""]
    if analysis.notes:
        lines += ["## Notes", ""] + [f"- {note}" for note in analysis.notes] + [""]
    if report.versus is not None:
        lines += baseline_lines(report.versus)
    lines += ["## Points", ""]
    if "added_for" in analysis.table and analysis.table["added_for"].notna().any():
        lines += ["A `+` after a value marks a point the runner's refinement added.", ""]
    return lines + points_table(with_cost(analysis.table, report.price), slo, analysis.axis)


def baseline_lines(versus: Comparison) -> list[str]:
    """The comparison with the baseline: the verdict first, then what moved and any configuration difference."""
    verdict = ("**Regression**: slower beyond noise" if versus.slower else
               "**Flagged**: moved beyond noise" if versus.flagged else "Not flagged: nothing moved beyond noise")
    lines = [f"## Against baseline {versus.baseline_id}", "", f"{verdict}.", ""]
    lines += [f"- {sentence}" for sentence in versus.sentences]
    if versus.differences:
        lines.append(f"- The configurations differ, so this is not a like-for-like comparison: "
                     f"{'; '.join(versus.differences)}.")
    return lines + [""]


def points_table(table: pd.DataFrame, slo: SLO | None, axis: SweepAxis = BATCH) -> list[str]:
    """Markdown rows, one per point along the run's axis: throughput with its repeat spread, decode step vs roofline, latencies, memory."""
    latency = [(column, header(column)) for column in ("ttft_ms_p50", "itl_ms_p50", "e2e_ms_p95")]
    if slo is not None and slo.column not in dict(latency):
        latency.append((slo.column, header(slo.column)))
    along = [] if axis.key in ("batch_size", "max_num_seqs") else [axis.noun]  # the bound column is the axis
    limit = "batch" if axis.key == "batch_size" else "max_num_seqs"  # the batch bound of each point
    costed = "cost_per_mtok" in table and table["cost_per_mtok"].notna().any()
    names = (along + [limit, "status", "trust", f"out {METRICS['output_tokens_per_s'].unit} (± or min–max)"]
             + [header(column) for column in ("decode_step_ms", "predicted_step_ms", "roofline_pct")] + ["bound"]
             + [label for _, label in latency] + [header("mem_peak_allocated"), header("energy_per_output_token_j")]
             + (["cost / 1M out tok"] if costed else []))
    rows = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    for _, p in table.iterrows():
        bound = p["batch_size"] if axis.key == "batch_size" else p.get("max_num_seqs", p["batch_size"])
        bound_text = "–" if _missing(bound) else str(int(bound))  # an endpoint server's limit may be unknown
        cells = [axis.value(p["x"]) for _ in along] + [_added(p, bound_text), _status(p), _text(p.get("trust")),
                 _spread(p), _cell(p.get("decode_step_ms")),
                 _cell(p.get("predicted_step_ms")), _cell(p.get("roofline_pct")), _text(p.get("bound"))]
        cells += [_cell(p.get(column)) for column, _ in latency]
        cells += [_cell(p.get("mem_peak_allocated"), scale=GiB), _cell(p.get("energy_per_output_token_j"))]
        cells += [_cell(p.get("cost_per_mtok"))] if costed else []
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _added(point: pd.Series, value: str) -> str:
    """The point's value, marked `+` when refinement added it."""
    return f"{value} +" if isinstance(point.get("added_for"), str) else value


def _status(point: pd.Series) -> str:
    error = point.get("error")
    return point["status"] if not isinstance(error, str) or not error else f"{point['status']}: {error}"


def _spread(point: pd.Series) -> str:
    """The throughput with its 95 % interval (a run measured until known) or its repeats' range (older)."""
    low, high = point.get("output_tokens_per_s_min"), point.get("output_tokens_per_s_max")
    median = _cell(point.get("output_tokens_per_s"))
    if not _missing(point.get("tokens_per_s_interval")):
        return f"{median} (± {pct(float(point['tokens_per_s_interval']), 1)})"
    if _missing(low) or _missing(high):
        return median
    return f"{median} ({num(low)}–{num(high)})"


def _cell(value: object, scale: float = 1.0) -> str:
    return "–" if _missing(value) else num(float(value) / scale)


def _text(value: object) -> str:
    return "–" if _missing(value) else str(value)


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
