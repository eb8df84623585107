"""The history DB: every run, point and sample in one DuckDB file that only the app process writes.

Reads are batchscope.store_reads' (Store inherits them); this module opens the file and writes.
One connection per Store; each reading thread gets its own cursor (DuckDB's MVCC lets pages read
while a sweep is being ingested) and writes are serialised by a lock shared by every Store on the
same file in this process. How the file is opened (made whole, another process's hold waited out, a
read-only file opened for browsing) is batchscope.store_file's.
"""
from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from runners.results.contract import parse_utc, utc_now

from batchscope import config
from batchscope.migrations import SchemaTooNewError
from batchscope.store_file import StoreUnavailableError, connect
from batchscope.store_reads import StoreReads

POINT_TABLES = ("repeats", "requests", "steps", "samples")
RUN_TABLES = ("quant_errors",)  # one file per run, not per point (runners/results/contract.py QUANT_ERROR)
_STATUS_COLUMNS = ("state", "error", "stopped_early", "pid", "points_done", "points_total",
                   "started_at", "heartbeat_at", "finished_at", "status_json")


_write_locks: dict[Path, threading.RLock] = {}
_write_locks_guard = threading.Lock()


def _write_lock_for(path: Path) -> threading.RLock:
    """One lock per DB file, so two Store objects in this process never interleave transactions."""
    with _write_locks_guard:
        return _write_locks.setdefault(path, threading.RLock())


def _pick(source: Mapping[str, Any] | None, *keys: str) -> Any:
    """The first present, non-empty value among `keys` of a JSON file that may be absent."""
    for key in keys:
        value = (source or {}).get(key)
        if value not in (None, ""):
            return value
    return None


def fingerprint(env: Mapping[str, Any] | None) -> str | None:
    """One line naming what makes runs comparable: device, driver, CUDA, torch, transformers, engine."""
    if not env:
        return None
    parts = [
        _pick(env, "gpu", "cpu", "device"),
        _labelled("driver", _pick(env, "driver")),
        _labelled("CUDA", _pick(env, "cuda")),
        _labelled("torch", _pick(env, "torch")),
        _labelled("transformers", _pick(env, "transformers")),
        _pick(env, "engine"),
    ]
    return " · ".join(str(part) for part in parts if part) or None


def _labelled(label: str, value: Any) -> str | None:
    return f"{label} {value}" if value else None


def _on_conflict(column: str) -> str:
    """How a refresh updates one runs column: status follows the folder, first-seen times stay, the rest
    keeps its stored value when the refresh has none."""
    if column in _STATUS_COLUMNS or column == "demo":
        return f"{column} = excluded.{column}"
    if column in ("created_at", "imported_at", "owner"):  # owner: whoever stored the run first
        return f"{column} = coalesce(runs.{column}, excluded.{column})"
    return f"{column} = coalesce(excluded.{column}, runs.{column})"


class Store(StoreReads):
    """Open (creating and migrating as needed) the history DB at `path`, default config.db_path(); a file
    this process cannot write opens read-only (`read_only` says why), and every write then raises
    StoreUnavailableError. Another process's hold on the file is waited out for up to config.db_wait_s()."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else config.db_path()
        self._write_lock = _write_lock_for(self.path.resolve())
        self._local = threading.local()
        with self._write_lock:
            try:
                self._con, reason = connect(self.path, config.db_wait_s())
            except SchemaTooNewError as error:
                raise SchemaTooNewError(f"{self.path} was written by a newer BatchScope ({error})") from None
            self.read_only: str | None = reason  # why this process cannot write the file; None when it can
            self._columns = {
                table: [row[0] for row in self._con.execute(f"DESCRIBE {table}").fetchall()]
                for table in ("runs", "points", *POINT_TABLES, *RUN_TABLES)
            }

    def close(self) -> None:
        with self._write_lock:
            self._con.close()

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the write lock for a write; a read-only store refuses it, saying why."""
        if self.read_only:
            raise StoreUnavailableError(self.read_only)
        with self._write_lock:
            yield

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def set_setting(self, key: str, value: str) -> None:
        with self._writing():
            self._con.execute("INSERT OR REPLACE INTO settings VALUES (?, ?, now())", [key, value])

    # ---- writes --------------------------------------------------------------------------------

    def upsert_run(
        self,
        run_id: str,
        folder: str | Path,
        spec: Mapping[str, Any],
        status: Mapping[str, Any],
        env: Mapping[str, Any] | None,
        model: Mapping[str, Any] | None,
        calibration: Mapping[str, Any] | None,
        demo: bool = False,
        owner: str = "local",
    ) -> None:
        """Insert or refresh a run. Status fields always follow `status`; env/model/calibration given as
        None keep what is stored (the runner writes them after it starts); a user's rename is kept, and
        so is the owner the run was first stored with."""
        values = {**self._run_values(run_id, folder, spec, status, env, model, calibration, demo), "owner": owner}
        columns = list(values)
        updates = ", ".join(_on_conflict(column) for column in columns if column not in ("run_id", "name"))
        sql = (f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)}) "
               f"ON CONFLICT (run_id) DO UPDATE SET {updates}")
        with self._writing():
            self._con.execute(sql, list(values.values()))
            if calibration and calibration.get("key"):
                self._store_calibration(run_id, calibration)

    @staticmethod
    def _run_values(run_id: str, folder: str | Path, spec: Mapping[str, Any], status: Mapping[str, Any],
                    env: Mapping[str, Any] | None, model: Mapping[str, Any] | None,
                    calibration: Mapping[str, Any] | None, demo: bool) -> dict[str, Any]:
        created = parse_utc(spec.get("created_at")) or parse_utc(status.get("started_at"))
        return {
            "run_id": run_id,
            "name": spec.get("name") or run_id,
            "folder": str(folder),
            "state": status.get("state"),
            "error": status.get("error"),
            "stopped_early": status.get("stopped_early"),
            "pid": status.get("pid"),
            "points_done": status.get("points_done"),
            "points_total": status.get("points_total"),
            "created_at": created,
            "started_at": parse_utc(status.get("started_at")),
            "heartbeat_at": parse_utc(status.get("heartbeat_at")),
            "finished_at": parse_utc(status.get("finished_at")),
            "model": spec.get("model"),
            "dtype": spec.get("dtype"),
            "engine": spec.get("engine"),
            "mode": spec.get("mode"),
            "device": _pick(env, "device") or spec.get("device"),
            "gpu_name": _pick(env, "gpu"),
            "gpu_memory_bytes": _pick(env, "gpu_memory_bytes"),
            "driver": _pick(env, "driver"),
            "cuda": _pick(env, "cuda"),
            "torch_version": _pick(env, "torch"),
            "transformers_version": _pick(env, "transformers"),
            "python_version": _pick(env, "python"),
            "host": _pick(env, "host"),
            "engine_version": _pick(env, "engine"),
            "fingerprint": fingerprint(env),
            "spec_json": json.dumps(spec, sort_keys=True, default=str),
            "status_json": json.dumps(status, sort_keys=True, default=str),
            "env_json": json.dumps(env, sort_keys=True, default=str) if env is not None else None,
            "model_json": json.dumps(model, sort_keys=True, default=str) if model is not None else None,
            "calibration_json": (json.dumps(calibration, sort_keys=True, default=str)
                                 if calibration is not None else None),
            "imported_at": utc_now(),
            "demo": demo,
        }

    def _store_calibration(self, run_id: str, calibration: Mapping[str, Any]) -> None:
        self._con.execute(
            """INSERT INTO calibrations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (key) DO UPDATE SET device = excluded.device, dtype = excluded.dtype,
                 copy_bytes_per_s = excluded.copy_bytes_per_s, matmul_flops_per_s = excluded.matmul_flops_per_s,
                 source = excluded.source, run_id = excluded.run_id, data_json = excluded.data_json,
                 updated_at = excluded.updated_at
               WHERE calibrations.data_json IS DISTINCT FROM excluded.data_json""",
            [calibration["key"], calibration.get("device"), calibration.get("dtype"),
             calibration.get("copy_bytes_per_s"), calibration.get("matmul_flops_per_s"),
             calibration.get("source"), run_id, json.dumps(calibration, sort_keys=True, default=str),
             utc_now()],
        )

    def set_state(self, run_id: str, state: str, error: str | None = None) -> None:
        """Set a run's state (and error text) in its row and in its stored status."""
        with self._writing():
            row = self._con.execute("SELECT status_json FROM runs WHERE run_id = ?", [run_id]).fetchone()
            if row is None:
                raise KeyError(run_id)
            status = json.loads(row[0]) if row[0] else {}
            status.update(state=state, error=error)
            self._con.execute(
                "UPDATE runs SET state = ?, error = ?, status_json = ? WHERE run_id = ?",
                [state, error, json.dumps(status, sort_keys=True, default=str), run_id],
            )

    def rename(self, run_id: str, name: str) -> None:
        """Give a run a display name; later ingests of the same run keep it."""
        name = name.strip()
        if not name:
            raise ValueError("a run name cannot be empty")
        with self._writing():
            found = self._con.execute("UPDATE runs SET name = ? WHERE run_id = ? RETURNING run_id",
                                      [name, run_id]).fetchall()
        if not found:
            raise KeyError(run_id)

    def delete(self, run_id: str, delete_folder: bool = False) -> None:
        """Remove every row of a run; with delete_folder, also its run folder.

        A folder is only ever removed when the app made it: inside the runs folder, named after the
        run, not a shipped demo run. Anything else (an imported folder, data/demo) raises ValueError
        before any row is touched, so a refused delete changes nothing.
        """
        folder = self._deletable_folder(run_id) if delete_folder else None
        with self._writing():
            self._con.execute("BEGIN TRANSACTION")
            try:
                for table in ("points", *POINT_TABLES, *RUN_TABLES, "runs"):
                    self._con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
                self._con.execute("COMMIT")
            except BaseException:
                self._con.execute("ROLLBACK")
                raise
        if folder is not None:
            shutil.rmtree(folder)

    def _deletable_folder(self, run_id: str) -> Path | None:
        row = self._cursor().execute("SELECT folder, demo FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if row is None or not row[0]:
            return None
        folder, demo = Path(row[0]).resolve(), bool(row[1])
        if demo:
            raise ValueError("a demo run's folder ships with BatchScope and is never deleted; "
                             "delete the run from the history only")
        if not folder.is_relative_to(config.runs_dir().resolve()) or folder.name != run_id:
            raise ValueError(f"{folder} was imported from outside the runs folder "
                             f"({config.runs_dir()}); BatchScope only deletes folders it made")
        is_run_folder = (folder / "spec.json").is_file() or (folder / "status.json").is_file()
        return folder if is_run_folder else None

    def add_point(self, run_id: str, point_index: int, summary: pa.Table,
                  details: Mapping[str, pa.Table]) -> bool:
        """Store one complete point (summary row + its detail tables) in a single transaction.

        Returns False, changing nothing, when the point is already stored. Columns the DB does not
        know are ignored, missing ones stay null; a value that does not convert raises duckdb.Error
        and nothing of the point is kept.
        """
        index_column = pa.array([point_index] * summary.num_rows, pa.int32())
        position = summary.schema.get_field_index("point_index")
        summary = (summary.set_column(position, "point_index", index_column) if position >= 0
                   else summary.append_column("point_index", index_column))
        with self._writing():
            if self._con.execute("SELECT 1 FROM points WHERE run_id = ? AND point_index = ?",
                                 [run_id, point_index]).fetchone():
                return False
            self._con.execute("BEGIN TRANSACTION")
            try:
                for table in POINT_TABLES:
                    self._con.execute(f"DELETE FROM {table} WHERE run_id = ? AND point_index = ?",
                                      [run_id, point_index])
                self._insert("points", run_id, summary)
                for table, rows in details.items():
                    self._insert(table, run_id, rows)
                self._con.execute("COMMIT")
            except BaseException:
                self._con.execute("ROLLBACK")
                raise
        return True

    def add_quant_errors(self, run_id: str, rows: pa.Table) -> bool:
        """Store a run's quant_error.parquet once; False, changing nothing, when the run has them already."""
        with self._writing():
            if self._con.execute("SELECT 1 FROM quant_errors WHERE run_id = ? LIMIT 1", [run_id]).fetchone():
                return False
            self._insert("quant_errors", run_id, rows)
        return True

    def _insert(self, table: str, run_id: str, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        known = [name for name in rows.column_names if name in self._columns[table] and name != "run_id"]
        source = rows.select(known).append_column("run_id", pa.array([run_id] * rows.num_rows, pa.string()))
        self._con.register("_batchscope_source", source)
        try:
            self._con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _batchscope_source")
        finally:
            self._con.unregister("_batchscope_source")

    # ---- team: the audit trail (issue 33) ------------------------------------------------------

    def record(self, actor: str, action: str, run_id: str | None = None, detail: str | None = None) -> None:
        """Append one audit row: who did what to which run, and when (UTC)."""
        with self._write_lock:
            self._con.execute("INSERT INTO audit VALUES (?, ?, ?, ?, ?)", [utc_now(), actor, action, run_id, detail])

    def record_once(self, actor: str, action: str, detail: str) -> bool:
        """Append a row unless one with this actor, action and detail exists (one sign-in per ID token,
        however many tabs it opens); True when it was appended."""
        with self._write_lock:
            if self._con.execute("SELECT 1 FROM audit WHERE actor = ? AND action = ? AND detail = ?",
                                 [actor, action, detail]).fetchone():
                return False
            self.record(actor, action, None, detail)
            return True
