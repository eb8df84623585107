"""Copy a run folder's finished points into the history DB: idempotent, and never stopped by one bad file."""
from __future__ import annotations

import getpass
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from runners.results import contract

from batchscope.runfolder import RunFolder
from batchscope.store import POINT_TABLES, Store
from batchscope.team.roles import LOCAL_USER


@dataclass
class IngestReport:
    """What one ingest did: points newly stored, and a warning per file it had to skip."""

    run_id: str
    points_added: int = 0
    warnings: list[str] = field(default_factory=list)


def default_owner() -> str:
    """Who owns a run stored without a signed-in user (a headless CLI run, an import from a shell)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        return LOCAL_USER


def ingest_run(store: Store, folder: str | Path, demo: bool = False, owner: str | None = None) -> IngestReport:
    """Upsert the run from its JSON files and store each complete point not stored yet.

    `owner` is recorded only when the run is stored for the first time (default: the OS user).

    A point is complete when its summary file exists and reads. A corrupt detail file is skipped with
    a warning and the point is stored without it; a corrupt summary leaves the point out.
    """
    run = RunFolder(folder)
    report = IngestReport(run.run_id)
    if not run.path.is_dir():
        report.warnings.append(f"{run.path}: not a directory; skipped")
        return report
    spec, status = run.spec(), run.status()
    if spec is None and status is None:
        report.warnings.extend(run.warnings or [f"{run.path}: no spec.json or status.json, not a run folder; skipped"])
        return report
    stored = store.run(run.run_id)
    if stored is not None and _different_run(stored, spec, run.path):
        report.warnings.append(f"{run.path}: another run named {run.run_id!r} is already stored (from "
                               f"{stored.get('folder')}); rename this folder and import it again; skipped")
        return report
    if status is None:
        status = (stored or {}).get("status") or {}
    try:
        store.upsert_run(run.run_id, run.path.resolve(), spec or {}, status, run.env(), run.model(),
                         run.calibration(), demo=demo, owner=owner or default_owner())
    except duckdb.Error as error:  # a value the runs table cannot hold, e.g. an env.json field of the wrong type
        report.warnings.extend(run.warnings)
        report.warnings.append(f"{run.path}: run not stored ({str(error).strip().splitlines()[0]}); skipped")
        return report
    _ingest_quant_errors(store, run, report)
    stored_points = store.point_indices(run.run_id)
    for index in run.complete_points():
        if index in stored_points:
            continue
        if _ingest_point(store, run, index, report):
            report.points_added += 1
    report.warnings.extend(run.warnings)
    return report


def _different_run(stored: dict, spec: dict | None, path: Path) -> bool:
    """Two folders with one basename: the same run moved (same creation time) or two runs (refuse)."""
    if Path(str(stored.get("folder"))).resolve() == path.resolve():
        return False
    created = (spec or {}).get("created_at")
    return created is None or created != (stored.get("spec") or {}).get("created_at")


def _ingest_quant_errors(store: Store, run: RunFolder, report: IngestReport) -> None:
    """A quantised run's per-product errors, stored once (the runner writes the file whole, before any point)."""
    table = run.quant_error()
    if table is None:
        return
    try:
        store.add_quant_errors(run.run_id, table)
    except duckdb.Error as error:
        report.warnings.append(f"{run.path / contract.QUANT_ERROR}: not stored ({str(error).strip().splitlines()[0]})")


def _ingest_point(store: Store, run: RunFolder, index: int, report: IngestReport) -> bool:
    summary_file = run.point_file(index, "summary")
    summary = run.read_point_table(index, "summary")
    if summary is None:
        return False
    if summary.num_rows != 1:
        report.warnings.append(f"{summary_file}: expected one summary row, found {summary.num_rows}; skipped")
        return False
    details = {}
    for kind in POINT_TABLES:
        table = run.read_point_table(index, kind)
        if table is not None:
            details[kind] = table
    try:
        return store.add_point(run.run_id, index, summary, details)
    except duckdb.Error as error:
        first_line = str(error).strip().splitlines()[0]
        report.warnings.append(f"{summary_file}: point {index} not stored ({first_line})")
        return False

