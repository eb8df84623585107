"""The history DB on a real DuckDB file: schema and migrations, run rows, points and detail reads."""
from __future__ import annotations

import threading
from datetime import date, datetime
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pytest

from batchscope.migrations import CURRENT_VERSION, SchemaTooNewError, migrate, schema_version
from batchscope.store import Store


def _spec(model: str = "tiny", dtype: str = "float32", **extra) -> dict:
    return {"model": model, "dtype": dtype, "engine": "hf-generate", "mode": "static",
            "batch_sizes": [1, 2], "name": extra.pop("name", ""), **extra}


def _status(state: str = "done", **extra) -> dict:
    return {"state": state, "pid": 4242, "points_done": 2, "points_total": 2, "current": None,
            "started_at": "2026-11-29T07:15:00+00:00", "heartbeat_at": "2026-11-29T07:16:00+00:00",
            "finished_at": None, "error": None, "stopped_early": None, **extra}


def _summary(batch_size: int, tokens_per_s: float, status: str = "ok") -> pa.Table:
    return pa.table({"point_index": pa.array([0], pa.int32()), "batch_size": pa.array([batch_size], pa.int32()),
                     "status": [status], "output_tokens_per_s": [tokens_per_s],
                     "mem_weights": pa.array([558336], pa.int64()), "not_in_schema": [1.5]})


def _requests(batch_size: int, point_index: int) -> pa.Table:
    return pa.table({"point_index": pa.array([point_index] * batch_size, pa.int32()),
                     "repeat": pa.array([0] * batch_size, pa.int32()),
                     "request_index": pa.array(range(batch_size), pa.int32()),
                     "ttft_ms": [10.0 * (i + 1) for i in range(batch_size)]})


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with Store(tmp_path / "history.duckdb") as opened:
        yield opened


def test_new_file_gets_current_schema(tmp_path: Path) -> None:
    path = tmp_path / "fresh.duckdb"
    Store(path).close()
    con = duckdb.connect(str(path))
    assert schema_version(con) == CURRENT_VERSION == 14
    tables = {row[0] for row in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert {"runs", "points", "repeats", "requests", "steps", "samples", "calibrations",
            "quant_errors", "schema_version"} <= tables
    indexes = {row[0] for row in con.execute("SELECT index_name FROM duckdb_indexes()").fetchall()}
    assert {"requests_run_point", "steps_run_point", "samples_run_point", "repeats_run_point"} <= indexes


def test_version_1_file_is_migrated_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    migrate(con, target=1)
    con.execute("INSERT INTO runs (run_id, name, state, model) VALUES ('old-run', 'kept', 'done', 'tiny')")
    con.execute("INSERT INTO points (run_id, point_index, batch_size, status, output_tokens_per_s) "
                "VALUES ('old-run', 0, 4, 'ok', 123.0)")
    assert schema_version(con) == 1
    assert "demo" not in {row[0] for row in con.execute("DESCRIBE runs").fetchall()}
    con.close()

    with Store(path) as store:
        runs = store.runs()
        assert list(runs["run_id"]) == ["old-run"]
        assert runs.loc[0, "name"] == "kept"
        assert not runs.loc[0, "demo"]
        assert runs.loc[0, "best_output_tokens_per_s"] == 123.0
        old_point = store.points(["old-run"])
        assert old_point.loc[0, "output_tokens_per_s"] == 123.0 and pd.isna(old_point.loc[0, "outlier_steps"])
        assert pd.isna(old_point.loc[0, "added_for"])
    con = duckdb.connect(str(path))
    assert schema_version(con) == CURRENT_VERSION
    assert [row[0] for row in con.execute("SELECT version FROM schema_version ORDER BY 1").fetchall()] == list(range(1, CURRENT_VERSION + 1))


def test_file_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "newer.duckdb"
    con = duckdb.connect(str(path))
    migrate(con)
    con.execute("INSERT INTO schema_version VALUES (?, NULL)", [CURRENT_VERSION + 1])
    con.close()
    with pytest.raises(SchemaTooNewError, match=f"version {CURRENT_VERSION + 1}"):
        Store(path)


def test_upsert_refreshes_status_keeps_env_and_rename(store: Store, tmp_path: Path) -> None:
    env = {"device": "cuda:0", "gpu": "NVIDIA H200", "driver": "570.1", "cuda": "12.8", "torch": "2.13.0",
           "transformers": "5.24.0", "python": "3.11.7", "host": "gpu1", "engine": "fast 0.1"}
    calibration = {"device": "NVIDIA H200", "dtype": "bfloat16", "copy_bytes_per_s": 4.0e12,
                   "matmul_flops_per_s": 9.0e14, "source": "measured", "key": "NVIDIA H200|570.1|bfloat16"}
    spec = _spec(name="first name", created_at="2026-11-29T07:14:00Z")
    store.upsert_run("r1", tmp_path / "r1", spec, _status("running"), env, {"params": 10}, calibration)
    store.rename("r1", "  my sweep ")
    store.upsert_run("r1", tmp_path / "r1", spec, _status("done", finished_at="2026-11-29T07:20:00Z"),
                     None, None, None)

    run = store.run("r1")
    assert run["name"] == "my sweep"
    assert run["state"] == "done"
    assert run["finished_at"] == datetime(2026, 11, 29, 7, 20)
    assert run["created_at"] == datetime(2026, 11, 29, 7, 14)
    assert run["env"] == env
    assert run["model"] == {"params": 10}
    assert run["gpu_name"] == "NVIDIA H200"
    assert run["fingerprint"] == ("NVIDIA H200 · driver 570.1 · CUDA 12.8 · torch 2.13.0 · "
                                  "transformers 5.24.0 · fast 0.1")
    assert run["status"]["state"] == "done"
    assert store.calibration("NVIDIA H200|570.1|bfloat16") == calibration
    assert store.calibration("no such key") is None
    assert store.run("missing") is None


def test_set_state_updates_row_and_status(store: Store, tmp_path: Path) -> None:
    store.upsert_run("r1", tmp_path / "r1", _spec(), _status("running"), None, None, None)
    store.set_state("r1", "interrupted", "runner process 4242 ended")
    run = store.run("r1")
    assert (run["state"], run["error"]) == ("interrupted", "runner process 4242 ended")
    assert run["status"]["state"] == "interrupted"
    assert run["status"]["points_done"] == 2
    with pytest.raises(KeyError):
        store.set_state("missing", "done")
    with pytest.raises(ValueError):
        store.rename("r1", "   ")


def test_runs_filters_and_point_aggregates(store: Store, tmp_path: Path) -> None:
    store.upsert_run("a", tmp_path / "a", _spec("tiny", created_at="2026-11-01T10:00:00Z"), _status("done"),
                     None, None, None)
    store.upsert_run("b", tmp_path / "b", _spec("llama-3.2-1b", "bfloat16", created_at="2026-11-20T10:00:00Z"),
                     _status("failed"), {"gpu": "NVIDIA H200", "device": "cuda:0"}, None, None, demo=True)
    store.upsert_run("c", tmp_path / "c", _spec("tiny", created_at="2026-11-25T23:30:00Z"), _status("running"),
                     {"device": "cpu"}, None, None)
    store.add_point("a", 0, _summary(1, 50.0), {})
    store.add_point("a", 1, _summary(2, 90.0), {})
    store.add_point("a", 2, _summary(4, 400.0, status="oom"), {})

    every = store.runs()
    assert list(every["run_id"]) == ["c", "b", "a"]
    a = every.set_index("run_id").loc["a"]
    assert (a["points"], a["points_ok"], a["best_output_tokens_per_s"]) == (3, 2, 90.0)
    assert every.set_index("run_id").loc["b", "points"] == 0
    assert list(store.runs(model="tiny")["run_id"]) == ["c", "a"]
    assert list(store.runs(state=["done", "failed"])["run_id"]) == ["b", "a"]
    assert list(store.runs(gpu="NVIDIA H200")["run_id"]) == ["b"]
    assert list(store.runs(gpu="cpu")["run_id"]) == ["c"]
    assert list(store.runs(dtype="bfloat16", engine="hf-generate")["run_id"]) == ["b"]
    assert list(store.runs(demo=True)["run_id"]) == ["b"]
    assert list(store.runs(since=date(2026, 11, 20), until=date(2026, 11, 25))["run_id"]) == ["c", "b"]
    assert list(store.runs(until="2026-11-20T09:59:59+00:00")["run_id"]) == ["a"]


def test_points_and_details_come_back_ordered_and_filtered(store: Store, tmp_path: Path) -> None:
    for run_id in ("x", "y"):
        store.upsert_run(run_id, tmp_path / run_id, _spec(), _status(), None, None, None)
    # Stored out of batch order on purpose; the reader sorts.
    store.add_point("x", 1, _summary(8, 30.0), {"requests": _requests(8, 1)})
    store.add_point("x", 0, _summary(2, 20.0), {"requests": _requests(2, 0)})
    store.add_point("y", 0, _summary(1, 10.0), {"requests": _requests(1, 0)})

    points = store.points(["y", "x"])
    assert list(zip(points["run_id"], points["batch_size"])) == [("y", 1), ("x", 2), ("x", 8)]
    assert list(points.loc[points["run_id"] == "x", "point_index"]) == [0, 1]
    assert "not_in_schema" not in points.columns
    assert points.loc[0, "mem_weights"] == 558336
    assert store.points([]).empty
    assert len(store.requests("x")) == 10
    only = store.requests("x", point_index=1)
    assert list(only["request_index"]) == list(range(8))
    assert list(only["ttft_ms"]) == [10.0 * (i + 1) for i in range(8)]
    assert store.point_indices("x") == {0, 1}
    assert store.add_point("x", 0, _summary(2, 99.0), {"requests": _requests(2, 0)}) is False
    assert len(store.requests("x", 0)) == 2
    assert store.points(["x"]).loc[0, "output_tokens_per_s"] == 20.0


def test_bad_value_stores_nothing_of_the_point(store: Store, tmp_path: Path) -> None:
    store.upsert_run("x", tmp_path / "x", _spec(), _status(), None, None, None)
    bad_requests = pa.table({"point_index": [0], "ttft_ms": ["not a number"]})
    with pytest.raises(duckdb.Error):
        store.add_point("x", 0, _summary(1, 5.0), {"requests": bad_requests})
    assert store.points(["x"]).empty
    assert store.requests("x").empty


def test_delete_removes_rows_and_only_a_run_folder(store: Store, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHSCOPE_RUNS", str(tmp_path / "runs"))
    folder = tmp_path / "runs" / "gone"
    folder.mkdir(parents=True)
    (folder / "spec.json").write_text("{}")
    store.upsert_run("gone", folder, _spec(), _status(), None, None, None)
    store.add_point("gone", 0, _summary(1, 5.0), {"requests": _requests(1, 0)})
    store.upsert_run("stays", tmp_path / "runs" / "stays", _spec(), _status(), None, None, None)
    store.delete("gone", delete_folder=True)
    assert list(store.runs()["run_id"]) == ["stays"]
    assert store.requests("gone").empty and store.points(["gone"]).empty
    assert not folder.exists()


def test_folders_the_app_did_not_make_are_never_deleted(store: Store, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHSCOPE_RUNS", str(tmp_path / "runs"))
    imported = tmp_path / "elsewhere" / "imported"
    imported.mkdir(parents=True)
    (imported / "spec.json").write_text("{}")
    store.upsert_run("imported", imported, _spec(), _status(), None, None, None)
    demo = tmp_path / "runs" / "demo-run"
    demo.mkdir(parents=True)
    (demo / "spec.json").write_text("{}")
    store.upsert_run("demo-run", demo, _spec(), _status(), None, None, None, demo=True)
    for run_id, reason in (("imported", "outside the runs folder"), ("demo-run", "demo run")):
        with pytest.raises(ValueError, match=reason):
            store.delete(run_id, delete_folder=True)
    assert imported.is_dir() and demo.is_dir()
    assert sorted(store.runs()["run_id"]) == ["demo-run", "imported"]  # a refused delete changes nothing
    store.delete("imported")
    assert imported.is_dir() and list(store.runs()["run_id"]) == ["demo-run"]


def test_reads_from_many_threads_while_writing(store: Store, tmp_path: Path) -> None:
    errors: list[BaseException] = []
    counts_by_reader: list[list[int]] = [[], [], []]

    def read(counts: list[int]) -> None:
        try:
            for _ in range(30):
                counts.append(len(store.runs()))
                store.points(["w0", "w1"])
        except BaseException as error:  # collected so the main thread can fail the test
            errors.append(error)

    def write() -> None:
        try:
            for i in range(30):
                store.upsert_run(f"w{i}", tmp_path / f"w{i}", _spec(), _status(), None, None, None)
                store.add_point(f"w{i}", 0, _summary(1, float(i)), {"requests": _requests(1, 0)})
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=write)]
    threads += [threading.Thread(target=read, args=(counts,)) for counts in counts_by_reader]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(store.runs()) == 30
    assert len(store.requests("w29")) == 1
    for counts in counts_by_reader:  # each reader sees committed runs only ever grow
        assert counts == sorted(counts) and counts[-1] <= 30


def test_gpu_utilisation_is_each_gpus_mean_over_measured_repeats(store: Store, tmp_path: Path) -> None:
    store.upsert_run("tp", tmp_path / "tp", _spec(tensor_parallel=2), _status("done"), None, None, None)
    # GPU 0 at 90 and 70 in repeat 0, GPU 1 at 40; a setup sample (repeat -1) at 0 must not count
    samples = pa.table({"t_s": [0.0, 0.1, 0.2, 0.2, 0.3], "point_index": pa.array([0] * 5, pa.int32()),
                        "repeat": pa.array([-1, 0, 0, 0, 0], pa.int32()),
                        "gpu_index": pa.array([0, 0, 0, 1, 1], pa.int32()),
                        "gpu_util_pct": [0.0, 90.0, 70.0, 40.0, 40.0]})
    store.add_point("tp", 0, _summary(1, 50.0), {"samples": samples})
    got = store.gpu_utilisation("tp")
    assert got[["point_index", "gpu_index"]].values.tolist() == [[0, 0], [0, 1]]
    assert got["gpu_util_pct"].tolist() == [80.0, 40.0]
