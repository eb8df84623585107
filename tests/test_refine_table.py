"""bench/refine_table.py: its clock (the model load counted once and apart, the measuring time to the run's end
or, for a run cut short, to its last finished point) and the dense grid it compares refinement against."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("refine_table", REPO / "bench" / "refine_table.py")
refine_table = sys.modules.setdefault("refine_table", importlib.util.module_from_spec(_spec))  # bench/ is no package
_spec.loader.exec_module(refine_table)

LOG = """2026-12-03T07:48:20.700+00:00 spec accepted
2026-12-03T07:48:22.700+00:00 model llama-3.1-8b: 8,030,261,248 params on cuda:0
2026-12-03T07:48:37.200+00:00 point 0 batch 4: ok 452.8 out tok/s
2026-12-03T07:48:43.200+00:00 point 1 batch 5: ok 529.2 out tok/s
"""


def run_folder(tmp_path: Path, finished_at: str | None) -> Path:
    (tmp_path / "log.txt").write_text(LOG)
    (tmp_path / "status.json").write_text(json.dumps({"started_at": "2026-12-03T07:48:20.200+00:00",
                                                      "finished_at": finished_at}))
    return tmp_path


def test_a_finished_run_measures_from_the_model_line_to_its_end(tmp_path: Path) -> None:
    load_s, measuring_s = refine_table.timing(run_folder(tmp_path, "2026-12-03T07:48:50.700+00:00"))
    assert (load_s, measuring_s) == (2.5, 28.0)


def test_a_run_cut_short_measures_to_its_last_finished_point(tmp_path: Path) -> None:
    load_s, measuring_s = refine_table.timing(run_folder(tmp_path, None))
    assert (load_s, measuring_s) == (2.5, 20.5)


def test_the_dense_grid_steps_over_the_whole_planned_range_and_keeps_its_largest_size() -> None:
    assert refine_table.dense_grid([4, 8, 16, 32], 2) == [4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32]
    assert refine_table.dense_grid([32, 4, 8], 8) == [4, 12, 20, 28, 32]
    assert refine_table.dense_grid([4, 8, 16], 1) == list(range(4, 17))


def test_the_limits_tolerance_is_the_dense_grids_least_step() -> None:
    points = [refine_table.Seen(float(b), True, 1.0, 1.0) for b in (4, 6, 8, 12)]
    assert refine_table.grid_step(points) == 2.0
