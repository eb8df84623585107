"""The history DB's queries: runs with their filters, points, repeats, per-request detail, the audit
trail. Store (batchscope.store) opens the file and writes; what a page reads is here, so a view gets its
data from the store and never from the job manager."""
from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import Any

import duckdb
import pandas as pd

from runners.results.contract import parse_utc

_JSON_FIELDS = ("spec", "status", "env", "model", "calibration")
_DETAIL_ORDER = {
    "requests": "point_index, repeat, request_index",
    "steps": "point_index, repeat, step_index",
    "samples": "t_s, point_index",
}


def _as_list(value: str | Sequence[str] | None) -> list[str] | None:
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


class StoreReads:
    """Every read of the history DB, on this thread's cursor of the Store's connection (`_con`)."""

    _con: duckdb.DuckDBPyConnection
    _local: threading.local

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's read cursor; dropped with the thread, closed with the Store."""
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            cursor = self._con.cursor()
            self._local.cursor = cursor
        return cursor

    def _frame(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        return self._cursor().execute(sql, list(params)).df()

    def runs(
        self,
        model: str | Sequence[str] | None = None,
        dtype: str | Sequence[str] | None = None,
        gpu: str | Sequence[str] | None = None,
        engine: str | Sequence[str] | None = None,
        state: str | Sequence[str] | None = None,
        since: datetime | date | str | None = None,
        until: datetime | date | str | None = None,
        demo: bool | None = None,
        owner: str | Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """One row per run, newest first; each filter takes a value or a list of accepted values.

        `gpu` matches the device name (GPU name, or "cpu"); `since`/`until` bound created_at (UTC),
        a plain date in `until` includes that whole day.
        """
        where, params = [], []
        for column, accepted in (("r.model", model), ("r.dtype", dtype), ("r.gpu", gpu),
                                 ("r.engine", engine), ("r.state", state), ("r.owner", owner)):
            values = _as_list(accepted)
            if values is not None:
                where.append(f"list_contains(?::VARCHAR[], {column})")
                params.append(values)
        if since is not None:
            where.append("r.created_at >= ?")
            params.append(parse_utc(since))
        if until is not None:
            end = parse_utc(until)
            if isinstance(until, date) and not isinstance(until, datetime):
                end += timedelta(days=1)
                where.append("r.created_at < ?")
            else:
                where.append("r.created_at <= ?")
            params.append(end)
        if demo is not None:
            where.append("r.demo = ?")
            params.append(demo)
        sql = f"""
            WITH r AS (SELECT *, coalesce(gpu_name, device) AS gpu FROM runs),
                 p AS (SELECT run_id, count(*) AS points,
                              count(*) FILTER (WHERE status = 'ok') AS points_ok,
                              max(output_tokens_per_s) FILTER (WHERE status = 'ok') AS best_output_tokens_per_s
                       FROM points GROUP BY run_id)
            SELECT r.run_id, r.name, r.created_at, r.state, r.error, r.model, r.dtype, r.engine, r.mode,
                   r.device, r.gpu, r.gpu_memory_bytes, r.driver, r.cuda, r.torch_version,
                   r.transformers_version, r.python_version, r.host, r.engine_version, r.fingerprint,
                   r.points_done, r.points_total,
                   coalesce(p.points, 0) AS points, coalesce(p.points_ok, 0) AS points_ok,
                   p.best_output_tokens_per_s, r.started_at, r.finished_at, r.demo, r.folder, r.owner
            FROM r LEFT JOIN p USING (run_id)
            {"WHERE " + " AND ".join(where) if where else ""}
            ORDER BY r.created_at DESC NULLS LAST, r.run_id DESC
        """
        return self._frame(sql, params)

    def run(self, run_id: str) -> dict[str, Any] | None:
        """Every stored field of one run, with spec/status/env/model/calibration as dicts (or None).

        "model" is model.json's dict; the model's name (the runs column) is under "model_name".
        """
        cursor = self._cursor().execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
        row = cursor.fetchone()
        if row is None:
            return None
        record = dict(zip([d[0] for d in cursor.description], row))
        record["model_name"] = record.pop("model")
        for name in _JSON_FIELDS:
            text = record.pop(f"{name}_json")
            record[name] = json.loads(text) if text else None
        return record

    def points(self, run_ids: Sequence[str]) -> pd.DataFrame:
        """Every summary column of the runs' points, in the order of `run_ids`, then by batch size."""
        return self._frame(
            """SELECT * FROM points WHERE list_contains(?::VARCHAR[], run_id)
               ORDER BY list_position(?::VARCHAR[], run_id), batch_size, point_index""",
            [list(run_ids), list(run_ids)],
        )

    def repeats(self, run_ids: Sequence[str]) -> pd.DataFrame:
        """One row per measured repeat of the runs' points (the throughput spread)."""
        return self._frame(
            """SELECT * FROM repeats WHERE list_contains(?::VARCHAR[], run_id)
               ORDER BY list_position(?::VARCHAR[], run_id), point_index, repeat""",
            [list(run_ids), list(run_ids)],
        )

    def requests(self, run_id: str, point_index: int | None = None) -> pd.DataFrame:
        return self._detail("requests", run_id, point_index)

    def steps(self, run_id: str, point_index: int | None = None) -> pd.DataFrame:
        return self._detail("steps", run_id, point_index)

    def samples(self, run_id: str, point_index: int | None = None) -> pd.DataFrame:
        return self._detail("samples", run_id, point_index)

    def gpu_utilisation(self, run_id: str) -> pd.DataFrame:
        """Each GPU's mean NVML utilisation per point over the samples inside measured repeats (the
        summary's rule, which averages the GPUs together): point_index, gpu_index, gpu_util_pct."""
        return self._frame("SELECT point_index, gpu_index, avg(gpu_util_pct) AS gpu_util_pct FROM samples "
                           "WHERE run_id = ? AND gpu_index IS NOT NULL AND repeat >= 0 "
                           "GROUP BY point_index, gpu_index ORDER BY point_index, gpu_index", [run_id])

    def _detail(self, table: str, run_id: str, point_index: int | None) -> pd.DataFrame:
        if point_index is None:
            return self._frame(f"SELECT * FROM {table} WHERE run_id = ? ORDER BY {_DETAIL_ORDER[table]}",
                               [run_id])
        return self._frame(
            f"SELECT * FROM {table} WHERE run_id = ? AND point_index = ? ORDER BY {_DETAIL_ORDER[table]}",
            [run_id, point_index],
        )

    def point_evidence(self, run_id: str) -> pd.DataFrame:
        """Per stored point, what the trust checks read beyond its summary: each repeat's output tokens/s
        in repeat order, the requests (tokens requested and delivered), those its latency percentiles count
        and their inter-token gaps (every request of a run made before runners' loaded.counts), and the
        measured steps."""
        return self._frame(
            """WITH q AS (SELECT point_index, count(*) AS requests, sum(output_len) AS requested_tokens,
                                 sum(generated_len) AS generated_tokens,
                                 count(*) FILTER (latency_counted IS NOT FALSE) AS latency_requests,
                                 sum(coalesce(generated_len, output_len) - 1) FILTER (latency_counted IS NOT FALSE)
                                     AS latency_gaps
                          FROM requests WHERE run_id = ? GROUP BY point_index),
                    s AS (SELECT point_index, count(*) AS steps FROM steps WHERE run_id = ? GROUP BY point_index),
                    r AS (SELECT point_index, list(output_tokens_per_s ORDER BY repeat) AS repeat_tokens_per_s
                          FROM repeats WHERE run_id = ? GROUP BY point_index)
               SELECT p.point_index, q.requests, q.requested_tokens, q.generated_tokens, q.latency_requests,
                      q.latency_gaps, s.steps,
                      r.repeat_tokens_per_s
               FROM points p LEFT JOIN q USING (point_index) LEFT JOIN s USING (point_index)
                    LEFT JOIN r USING (point_index)
               WHERE p.run_id = ? ORDER BY p.point_index""",
            [run_id] * 4,
        )

    def quant_errors(self, run_id: str) -> pd.DataFrame:
        """A quantised run's per-product error against bfloat16: rows, kernel, layer, matrix, rel_error."""
        return self._frame("SELECT rows, kernel, layer, matrix, rel_error FROM quant_errors WHERE run_id = ? "
                           "ORDER BY rows, layer, matrix", [run_id])

    def calibration(self, key: str) -> dict[str, Any] | None:
        """The calibration.json last stored under `key` (GPU name + driver + dtype)."""
        row = self._cursor().execute("SELECT data_json FROM calibrations WHERE key = ?", [key]).fetchone()
        return json.loads(row[0]) if row else None

    def setting(self, key: str) -> str | None:
        """A value the app remembers across restarts (e.g. that the demo runs were imported once)."""
        row = self._cursor().execute("SELECT value FROM settings WHERE key = ?", [key]).fetchone()
        return row[0] if row else None

    def point_indices(self, run_id: str) -> set[int]:
        """Indices of the run's points already stored (what makes ingest idempotent)."""
        rows = self._cursor().execute("SELECT point_index FROM points WHERE run_id = ?", [run_id]).fetchall()
        return {row[0] for row in rows}

    def audit(self, limit: int = 1000) -> pd.DataFrame:
        """The latest audit rows, newest first: occurred_at, actor, action, run_id, detail."""
        return self._frame("SELECT occurred_at, actor, action, run_id, detail FROM audit "
                           "ORDER BY occurred_at DESC LIMIT ?", [limit])
