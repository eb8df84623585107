"""What the shipped demo set holds, read from its folders (not through the app), for the tests that check which run
a page opens."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from batchscope.demo import demo_folders
from batchscope.ui.run_view import MIN_CURVE_POINTS
from tests.runner_helpers import REPO

DEMO = REPO / "data" / "demo"


def ok_points(folder: Path) -> int:
    return sum(pq.read_table(f, columns=["status"]).column("status").to_pylist() == ["ok"]
               for f in (folder / "points").glob("*.summary.parquet"))


def newest_demo_run_with_a_curve() -> str:
    """The demo run started last that ended done with a curve: what a plain Run page opens on a first start."""
    done = [(json.loads((f / "status.json").read_text()), f) for f in demo_folders(DEMO)]
    return max((status["started_at"], folder.name) for status, folder in done
               if status["state"] == "done" and ok_points(folder) >= MIN_CURVE_POINTS)[1]
