"""The shipped demo runs (real H200 sweeps in data/demo/): imported once into a fresh history.

Imported on the first start only, so a user who deletes a demo run does not see it come back;
`import_demo_runs(store, force=True)` brings them back on request. Ingest is idempotent, so a forced
import never duplicates a run that is still there.
"""
from __future__ import annotations

from pathlib import Path

from runners.results.contract import utc_now

from batchscope import config
from batchscope.ingest import IngestReport, ingest_run
from batchscope.store import Store

IMPORTED_KEY = "demo_imported_at"


def demo_folders(demo_dir: Path | None = None) -> list[Path]:
    root = demo_dir or config.demo_dir()
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "spec.json").is_file()) if root.is_dir() else []


def import_demo_runs(store: Store, demo_dir: Path | None = None, force: bool = False) -> list[IngestReport]:
    """Import every demo run folder once (marked demo); later calls do nothing unless forced."""
    if store.setting(IMPORTED_KEY) and not force:
        return []
    reports = [ingest_run(store, folder, demo=True, owner="demo") for folder in demo_folders(demo_dir)]
    store.set_setting(IMPORTED_KEY, utc_now())
    return reports
