"""The History page's logic: filter choices, the runs table, overlay labels, rename and import checks."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from batchscope.analysis.cost import with_cost
from batchscope.analysis.marker import Marker
from batchscope.analysis.slo import METRIC_NAMES
from batchscope.explain import partners
from batchscope.ingest import ingest_run
from batchscope.jobs import settle_if_runner_gone
from batchscope.runfolder import RunFolder
from batchscope.store import Store
from batchscope.ui.overlay_compare import at_point, compared
from batchscope.ui.run_view import RunData
from batchscope.ui.tables import decimals
from batchscope.units import GiB
from runners.spec.sweep import DTYPE_SHORT

FILTER_COLUMNS = {"model": "model", "dtype": "dtype", "gpu": "GPU / device", "engine": "engine",
                  "state": "status"}
MAX_OVERLAY = 10
# Key columns first: which run, how it ended, what it reached; then what it ran on; the long fingerprint last.
RUNS_TABLE_COLUMNS = {
    "name": "name", "state": "status", "points_ok": "points ok", "points": "points",
    "best_output_tokens_per_s": "best output tok/s", "run_id": "run id", "owner": "owner", "model": "model", "dtype": "dtype",
    "engine": "engine", "gpu": "GPU / device", "host": "host", "created_at": "created (UTC)",
    "fingerprint": "fingerprint",
}


def filter_choices(runs: pd.DataFrame) -> dict[str, list[str]]:
    """The values each filter can take: whatever the stored runs hold, sorted."""
    return {column: sorted(str(v) for v in runs[column].dropna().unique())
            for column in FILTER_COLUMNS if column in runs}


def runs_display(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run with its fingerprint, status and headline numbers, readable headers."""
    columns = [c for c in RUNS_TABLE_COLUMNS if c in runs]
    shown = runs[columns].copy()
    if "demo" in runs:
        shown["name"] = [f"{n} (demo)" if d else n for n, d in zip(shown["name"], runs["demo"].fillna(False))]
    return shown.rename(columns=RUNS_TABLE_COLUMNS).reset_index(drop=True)


def overlay_labels(runs: pd.DataFrame, run_ids: list[str]) -> dict[str, str]:
    """A legend label per run (`name · dtype · GPU`), made unique so two runs never share a colour. The dtype is
    left out where the name already says it ("8B · fp8", "1B · bf16"), so a label never reads "fp8 · fp8"."""
    by_id = runs.set_index("run_id")
    labels: dict[str, str] = {}
    for run_id in run_ids:
        row = by_id.loc[run_id] if run_id in by_id.index else None
        parts = {} if row is None else {c: str(row[c]) for c in ("name", "dtype", "gpu")
                                        if c in row and pd.notna(row[c]) and str(row[c])}
        if "dtype" in parts and _name_says_dtype(parts.get("name", ""), parts["dtype"]):
            del parts["dtype"]
        label = " · ".join(parts.values()) or run_id
        if label in labels.values():
            label = f"{label} [{run_id}]"
        labels[run_id] = label
    return labels


def _name_says_dtype(name: str, dtype: str) -> bool:
    """Whether one of the name's " · " words is the dtype or its short form (bfloat16 → bf16)."""
    words = {word.strip().lower() for word in name.split("·")}
    return bool(words & {dtype.lower(), DTYPE_SHORT.get(dtype, dtype).lower()})


def overlay_problem(run_ids: list[str]) -> str | None:
    """Why an overlay selection cannot be drawn, or None."""
    if len(run_ids) > MAX_OVERLAY:
        return f"overlay at most {MAX_OVERLAY} runs at once so the charts stay readable ({len(run_ids)} chosen)"
    return None


def rename_problem(name: str) -> str | None:
    return "a run name cannot be empty" if not name.strip() else None


@dataclass
class ImportResult:
    """What importing a folder did, in words for the page: an error, or the points added and warnings."""

    error: str | None = None
    run_id: str | None = None
    points_added: int = 0
    warnings: list[str] = field(default_factory=list)


def import_folder(store: Store, path_text: str, owner: str | None = None) -> ImportResult:
    """Ingest a run folder made elsewhere; a path that is not a run folder is refused with a reason."""
    text = path_text.strip()
    if not text:
        return ImportResult(error="enter the path of a run folder (it holds spec.json and status.json)")
    path = Path(text).expanduser()
    if not path.is_dir():
        return ImportResult(error=f"{text!r} is not a folder on this machine")
    if not RunFolder(path).looks_like_run():
        return ImportResult(error=f"{text!r} holds no spec.json or status.json: not a run folder")
    report = ingest_run(store, path, owner=owner)
    settle_if_runner_gone(store, report.run_id)
    return ImportResult(run_id=report.run_id, points_added=report.points_added, warnings=list(report.warnings))


def axis_problem(overlay: dict[str, RunData]) -> str | None:
    """Why loaded runs cannot share one x axis, or None: requests/s and batch sizes are different units."""
    axes = {label: data.analysis.axis for label, data in overlay.items() if data.analysis is not None}
    rates = sorted(label for label, axis in axes.items() if not axis.is_batch_limit)
    if rates and len(rates) < len(axes):
        return (f"{', '.join(rates)} sweep(s) the arrival rate (requests/s on the x axis) and cannot share an axis "
                f"with batch-size sweeps: overlay arrival-rate sweeps only with each other")
    return None


FINGERPRINT_FIELDS = {"device": "GPU / device", "driver": "driver", "cuda": "CUDA", "torch_version": "torch",
                      "transformers_version": "transformers", "engine_version": "engine"}


def fingerprints(overlay: dict[str, RunData]) -> pd.DataFrame:
    """One row per overlaid run: what it ran on and with, so a comparison is read with them in view."""
    rows = []
    for label, data in overlay.items():
        run = data.run
        device = run.get("gpu_name") or run.get("device")
        rows.append({"run": label, **{title: str(value) if value else "—" for title, value in zip(
            FINGERPRINT_FIELDS.values(), [device, *(run.get(f) for f in list(FINGERPRINT_FIELDS)[1:])])}})
    return pd.DataFrame(rows, columns=["run", *FINGERPRINT_FIELDS.values()])


def device_problem(overlay: dict[str, RunData]) -> str | None:
    """Why the overlaid numbers are not comparable, or None: runs measured on different devices."""
    devices = fingerprints(overlay).groupby("GPU / device")["run"].apply(list)
    if len(devices) < 2:
        return None
    listed = "; ".join(f"{device}: {', '.join(runs)}" for device, runs in devices.items())
    return (f"These runs were measured on different devices ({listed}): compare the shapes of their curves, "
            f"not their numbers.")


def comparison_table(overlay: dict[str, RunData], prices: dict[str, float | None] | None = None,
                     latency: str = "itl") -> pd.DataFrame:
    """One row per overlaid run: where its knee markers fall, its best throughput, its weights and the
    largest point that fit — the side-by-side a bfloat16 vs fp8 (or fast vs hf-generate) question needs —
    and at its working point the throughput, P95 `latency`, cost per 1M output tokens (at `prices`, by
    label: each run's GPU type's price per GPU-hour), energy per token and throughput per GPU, so TP vs
    replicas compare in money too. Markers are read over the values every run measured when the runs'
    values differ (overlay_compare.compared)."""
    rows = []
    markers, _ = compared(overlay)
    for label, data in overlay.items():
        analysis, table = data.analysis, data.table
        axis = analysis.axis
        ok = table[table["status"] == "ok"]
        best = ok.loc[ok["output_tokens_per_s"].idxmax()] if ok["output_tokens_per_s"].notna().any() else None
        oom = table[table["status"] == "oom"]
        weights = ok["mem_weights"].dropna() if "mem_weights" in ok else pd.Series(dtype=float)
        marker = {name: "—" if found is None else axis.value(found.x) for name, found in (
            ("plateau", markers[label].plateau), ("Kneedle", markers[label].kneedle),
            ("working point", markers[label].working_point))}
        rows.append({  # key columns first: the answer (best, working point, limits), then the detail
            "run": label,
            "best output tok/s": None if best is None else float(best["output_tokens_per_s"]),
            "best at": "—" if best is None else axis.value(best["x"]),
            "working point": marker["working point"],
            **_at_working_point(data, markers[label].working_point, (prices or {}).get(label), latency),
            "weights GiB": float(weights.median()) / GiB if not weights.empty else None,
            "largest that ran": "—" if ok.empty else axis.value(ok["x"].max()),
            "first OOM": "—" if oom.empty else axis.value(oom["x"].min()),
            "plateau": marker["plateau"], "Kneedle": marker["Kneedle"],
            "decode step ms (first point)": None if ok.empty else _number(ok.iloc[0].get("decode_step_ms")),
            "axis": axis.noun,
        })
    return pd.DataFrame(rows)


def comparison_display(table: pd.DataFrame) -> pd.DataFrame:
    """The side by side as shown: numbers at the decimals their column deserves, and an empty cell, never
    "None" or a dash, where a run has no value."""
    shown = table.copy()
    for column in shown.columns:
        values = shown[column]
        if values.map(lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))).all():
            places = decimals(pd.to_numeric(values, errors="coerce"))
            shown[column] = [f"{float(v):,.{places}f}" if _number(v) is not None else "" for v in values]
        else:
            shown[column] = ["" if v is None or v == "—" or (isinstance(v, float) and pd.isna(v)) else str(v)
                             for v in values]
    return shown


def _at_working_point(data: RunData, marker: Marker | None, price: float | None, latency: str) -> dict[str, object]:
    """Throughput, P95 latency, cost per 1M output tokens, J per output token, output tok/s per GPU and
    the verdict at the working point."""
    name = f"P95 {METRIC_NAMES[latency]} ms at working point"
    point = at_point(data, marker)
    if point is None:
        return {"output tok/s at working point": None, name: None, "cost / 1M tok at working point": None,
                "J / token at working point": None, "tok/s per GPU at working point": None,
                "working point trust": "—"}
    costed = with_cost(point.to_frame().T, price).iloc[0]
    return {"output tok/s at working point": _number(point["output_tokens_per_s"]),
            name: _number(point.get(f"{latency}_ms_p95")),
            "cost / 1M tok at working point": _number(costed["cost_per_mtok"]),
            "J / token at working point": _number(point.get("energy_per_output_token_j")),
            "tok/s per GPU at working point": _number(costed["output_tokens_per_s_per_gpu"]),
            "working point trust": point.get("trust") or "—"}


def _number(value: object) -> float | None:
    return None if value is None or isinstance(value, str) or pd.isna(value) else float(value)


def overlay_runs(labels: dict[str, str], load: Callable[[str], RunData | None]) -> dict[str, RunData]:
    """Each chosen run with points, analysed by `load` (run id → RunData), keyed by its legend label;
    runs without points are left out."""
    loaded = {label: load(run_id) for run_id, label in labels.items()}
    return {label: data for label, data in loaded.items() if data is not None and data.analysis is not None}


def default_overlay(runs: pd.DataFrame, default_run: Callable[[], str | None],
                    load: Callable[[str], RunData | None]) -> list[str]:
    """The overlay History offers on a history of demo runs alone (a first start on a laptop): the Explain
    default run (`default_run()`, asked only then) beside one finished run of every other model measured the same
    way (engine, dtype, request lengths, GPUs, batch-size axis), smallest model first, so the first comparison is
    between models. Empty on a history holding a run of the user's own (they choose what to compare) or where no
    second model was measured that way."""
    if runs.empty or not runs["demo"].fillna(False).astype(bool).all():
        return []
    anchor_id = default_run()
    anchor = load(anchor_id) if anchor_id is not None else None
    if anchor is None or anchor.analysis is None or anchor.analysis.axis.key != "batch_size":
        return []
    spec = anchor.run.get("spec")
    picked = {anchor.run.get("model_name"): anchor}
    candidates = runs[(runs["engine"] == anchor.run.get("engine")) & (runs["dtype"] == anchor.run.get("dtype"))
                      & (runs["state"] == "done") & (runs["points_ok"] > 0)]
    ranked = candidates.sort_values(["points_ok", "run_id"], ascending=[False, True], kind="stable")
    for row in ranked.to_dict("records"):
        if row["model"] in picked:
            continue
        data = load(str(row["run_id"]))
        if (data is not None and data.analysis is not None and data.analysis.axis.key == "batch_size"
                and partners.lengths(data.run.get("spec")) == partners.lengths(spec)
                and partners.gpus(data.run.get("spec")) == partners.gpus(spec)):
            picked[row["model"]] = data
    if len(picked) < 2:
        return []
    by_size = sorted(picked.values(), key=lambda data: int((data.run.get("model") or {}).get("params") or 0))
    return [data.run["run_id"] for data in by_size]
