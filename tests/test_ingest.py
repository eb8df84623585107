"""Ingest of hand-built run folders (docs/run-folder.md): idempotent, and bad files only cost warnings."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from batchscope.ingest import ingest_run
from batchscope.store import Store
from tests.db_helpers import dump_tables



def _write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value))


def _write_point(folder: Path, index: int, batch_size: int, summary: bool = True) -> None:
    points = folder / "points"
    points.mkdir(exist_ok=True)
    i32 = pa.int32()
    rows = range(batch_size)
    pq.write_table(pa.table({"point_index": pa.array([index] * batch_size, i32),
                             "repeat": pa.array([0] * batch_size, i32),
                             "request_index": pa.array(rows, i32),
                             "batch_size": pa.array([batch_size] * batch_size, i32),
                             "ttft_ms": [5.0 + r for r in rows], "e2e_ms": [50.0 + r for r in rows]}),
                   points / f"p{index:04d}.requests.parquet")
    pq.write_table(pa.table({"point_index": pa.array([index] * 3, i32), "repeat": pa.array([0] * 3, i32),
                             "step_index": pa.array([0, 1, 2], i32), "phase": ["prefill", "decode", "decode"],
                             "duration_ms": [4.0, 1.0, 1.0]}),
                   points / f"p{index:04d}.steps.parquet")
    pq.write_table(pa.table({"t_s": [0.1 * index, 0.1 * index + 0.05], "point_index": pa.array([index] * 2, i32),
                             "repeat": pa.array([0, 0], i32), "phase": ["prefill", "decode"],
                             "cpu_pct": [90.0, 95.0], "source": ["proc", "proc"]}),
                   points / f"p{index:04d}.samples.parquet")
    pq.write_table(pa.table({"point_index": pa.array([index], i32), "repeat": pa.array([0], i32),
                             "batch_size": pa.array([batch_size], i32), "wall_ms": [60.0],
                             "output_tokens_per_s": [batch_size * 100.0]}),
                   points / f"p{index:04d}.repeats.parquet")
    if summary:
        pq.write_table(pa.table({"point_index": pa.array([index], i32), "batch_size": pa.array([batch_size], i32),
                                 "status": ["ok"], "error": pa.array([None], pa.string()),
                                 "output_tokens_per_s": [batch_size * 100.0], "ttft_ms_p50": [5.0],
                                 "timing": ["perf_counter"]}),
                       points / f"p{index:04d}.summary.parquet")


def make_run_folder(root: Path, run_id: str = "20261129-071500-tiny-3fa2c1", batch_sizes=(1, 2, 4),
                    state: str = "done") -> Path:
    folder = root / run_id
    folder.mkdir(parents=True)
    _write_json(folder / "spec.json", {"model": "tiny", "dtype": "float32", "engine": "hf-generate",
                                       "mode": "static", "batch_sizes": list(batch_sizes), "name": "",
                                       "run_id": run_id, "created_at": "2026-11-29T07:15:00+00:00"})
    _write_json(folder / "status.json", {"state": state, "run_id": run_id, "pid": 1, "points_done": len(batch_sizes),
                                         "points_total": len(batch_sizes), "current": None,
                                         "started_at": "2026-11-29T07:15:01+00:00",
                                         "heartbeat_at": "2026-11-29T07:15:09+00:00",
                                         "finished_at": "2026-11-29T07:15:09+00:00", "error": None,
                                         "stopped_early": None})
    _write_json(folder / "env.json", {"device": "cpu", "cpu": "AMD EPYC", "torch": "2.13.0+cpu"})
    _write_json(folder / "model.json", {"name": "tiny", "params": 139584})
    _write_json(folder / "calibration.json", {"device": "AMD EPYC", "dtype": "float32", "key": "AMD EPYC|-|float32",
                                              "copy_bytes_per_s": 1.0e10, "matmul_flops_per_s": 2.0e10,
                                              "source": "measured"})
    for index, batch_size in enumerate(batch_sizes):
        _write_point(folder, index, batch_size)
    return folder



@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "history.duckdb"


def test_ingest_stores_everything_once(tmp_path: Path, store_path: Path) -> None:
    folder = make_run_folder(tmp_path)
    with Store(store_path) as store:
        report = ingest_run(store, folder)
        assert (report.run_id, report.points_added, report.warnings) == (folder.name, 3, [])
        run = store.run(folder.name)
        assert run["state"] == "done" and run["model_name"] == "tiny" and run["env"]["cpu"] == "AMD EPYC"
        assert run["model"] == {"name": "tiny", "params": 139584}
        assert list(store.points([folder.name])["batch_size"]) == [1, 2, 4]
        assert len(store.requests(folder.name)) == 1 + 2 + 4
        assert list(store.steps(folder.name, 2)["phase"]) == ["prefill", "decode", "decode"]
        assert len(store.samples(folder.name)) == 6
        assert list(store.repeats([folder.name])["output_tokens_per_s"]) == [100.0, 200.0, 400.0]
        assert store.calibration("AMD EPYC|-|float32")["copy_bytes_per_s"] == 1.0e10
    before = dump_tables(store_path)

    with Store(store_path) as store:
        again = ingest_run(store, folder)
    assert (again.points_added, again.warnings) == (0, [])
    assert dump_tables(store_path) == before


def test_point_is_ingested_once_its_summary_exists(tmp_path: Path, store_path: Path) -> None:
    folder = make_run_folder(tmp_path, batch_sizes=(1,), state="running")
    _write_point(folder, 1, 2, summary=False)
    with Store(store_path) as store:
        assert ingest_run(store, folder).points_added == 1
        assert store.requests(folder.name, 1).empty
        _write_point(folder, 1, 2)
        assert ingest_run(store, folder).points_added == 1
        assert len(store.requests(folder.name, 1)) == 2
        assert store.run(folder.name)["state"] == "running"


def test_truncated_summary_is_skipped_with_a_warning_naming_it(tmp_path: Path, store_path: Path) -> None:
    folder = make_run_folder(tmp_path)
    summary = folder / "points" / "p0001.summary.parquet"
    summary.write_bytes(summary.read_bytes()[:40])
    with Store(store_path) as store:
        report = ingest_run(store, folder)
        assert report.points_added == 2
        assert len(report.warnings) == 1 and str(summary) in report.warnings[0]
        assert list(store.points([folder.name])["batch_size"]) == [1, 4]
        assert store.requests(folder.name, 1).empty


def test_truncated_detail_file_costs_only_that_file(tmp_path: Path, store_path: Path) -> None:
    folder = make_run_folder(tmp_path)
    requests = folder / "points" / "p0002.requests.parquet"
    requests.write_bytes(requests.read_bytes()[:-30])
    with Store(store_path) as store:
        report = ingest_run(store, folder)
        assert report.points_added == 3
        assert len(report.warnings) == 1 and str(requests) in report.warnings[0]
        assert store.requests(folder.name, 2).empty
        assert len(store.steps(folder.name, 2)) == 3


def test_corrupt_json_is_a_warning_not_a_crash(tmp_path: Path, store_path: Path) -> None:
    folder = make_run_folder(tmp_path)
    (folder / "env.json").write_text('{"device": "cp')
    (folder / "model.json").write_text("[1, 2]")
    with Store(store_path) as store:
        report = ingest_run(store, folder)
        assert report.points_added == 3
        assert sorted(report.warnings) == sorted([
            f"{folder / 'env.json'}: not valid JSON (Unterminated string starting at at line 1); skipped",
            f"{folder / 'model.json'}: expected a JSON object, found list; skipped",
        ])
        assert store.run(folder.name)["env"] is None


def test_summary_with_wrong_types_is_reported_and_not_stored(tmp_path: Path, store_path: Path) -> None:
    folder = make_run_folder(tmp_path, batch_sizes=(1,))
    summary = folder / "points" / "p0000.summary.parquet"
    pq.write_table(pa.table({"point_index": [0], "batch_size": ["one"], "status": ["ok"]}), summary)
    with Store(store_path) as store:
        report = ingest_run(store, folder)
        assert report.points_added == 0
        assert len(report.warnings) == 1 and report.warnings[0].startswith(f"{summary}: point 0 not stored")
        assert store.points([folder.name]).empty and store.requests(folder.name).empty


def test_folder_that_is_not_a_run_is_only_a_warning(tmp_path: Path, store_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with Store(store_path) as store:
        report = ingest_run(store, empty)
        assert report.points_added == 0
        assert report.warnings == [f"{empty}: no spec.json or status.json, not a run folder; skipped"]
        assert ingest_run(store, tmp_path / "missing").warnings == [f"{tmp_path / 'missing'}: not a directory; skipped"]
        assert store.runs().empty


def test_demo_flag_is_stored(tmp_path: Path, store_path: Path) -> None:
    folder = make_run_folder(tmp_path)
    with Store(store_path) as store:
        ingest_run(store, folder, demo=True)
        assert list(store.runs(demo=True)["run_id"]) == [folder.name]
        assert store.runs(demo=False).empty


def test_a_second_run_with_the_same_folder_name_is_refused(tmp_path: Path) -> None:
    """Two different sweeps both called `exp`: the second import must not merge into the first."""
    first = tmp_path / "a" / "exp"
    second = tmp_path / "b" / "exp"
    for folder, created in ((first, "2026-01-01T00:00:00+00:00"), (second, "2026-02-02T00:00:00+00:00")):
        folder.mkdir(parents=True)
        (folder / "spec.json").write_text(json.dumps({"model": "tiny", "batch_sizes": [1], "created_at": created}))
        (folder / "status.json").write_text(json.dumps({"state": "done", "run_id": "exp"}))
    store = Store(tmp_path / "h.duckdb")
    assert not ingest_run(store, first).warnings
    report = ingest_run(store, second)
    assert report.points_added == 0 and "already stored" in report.warnings[0]
    assert Path(store.run("exp")["folder"]).resolve() == first.resolve()
    moved = tmp_path / "c" / "exp"
    shutil.copytree(first, moved)  # the same run, moved: accepted
    assert not ingest_run(store, moved).warnings
    store.close()
