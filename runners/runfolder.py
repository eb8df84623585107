"""Writes the run folder (docs/run-folder.md): every file atomically, status with a heartbeat."""
from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from runners import schemas

HEARTBEAT_S = 2.0
APP_WRITTEN = {"spec.json", "status.json"}  # what the app may leave in a queued folder


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _atomic_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: Path, value: Any) -> None:
    _atomic_bytes(path, json.dumps(value, indent=2, default=str).encode())


def write_parquet(path: Path, rows: list[dict[str, Any]], schema: pa.Schema | None = None) -> None:
    """Rows → Parquet via a temp file; an empty list still writes a file with the given schema."""
    table = pa.Table.from_pylist(rows, schema=schema) if rows or schema is None else schema.empty_table()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        pq.write_table(table, f, compression="zstd")
        f.flush()
        os.fsync(f.fileno())  # durable before it becomes visible: a crash never leaves a torn point
    os.replace(tmp, path)


def check_out_dir(out: Path) -> None:
    """Refuse to write over another run: the folder must be new, empty, or hold only a queued request."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a directory")
    if out.is_dir():
        # dot-files are in-flight atomic writes (the app records the pid right after launching us)
        leftovers = {p.name for p in out.iterdir() if not p.name.startswith(".")} - APP_WRITTEN
        if leftovers:
            raise ValueError(f"--out {out} already holds a run ({', '.join(sorted(leftovers)[:3])}); "
                             f"choose a new folder")


class RunFolder:
    """One sweep's folder; owns status.json and keeps its heartbeat fresh from a daemon thread."""

    def __init__(self, out: Path, points_total: int) -> None:
        self.root = out
        self.points = out / "points"
        self.points.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.status: dict[str, Any] = {
            "state": "running", "run_id": out.name, "pid": os.getpid(), "points_done": 0,
            "points_total": points_total, "current": None, "started_at": utc_now(),
            "heartbeat_at": utc_now(), "finished_at": None, "error": None, "stopped_early": None,
        }
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
        self.update()
        self._beat.start()

    def update(self, **changes: Any) -> None:
        with self._lock:
            self.status.update(changes)
            self.status["heartbeat_at"] = utc_now()
            write_json(self.root / "status.json", self.status)

    def finish(self, state: str, error: str | None = None) -> None:
        self._stop.set()
        self.update(state=state, error=error, current=None, finished_at=utc_now())

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self.update()

    def log(self, line: str) -> None:
        with open(self.root / "log.txt", "a") as f:
            f.write(f"{utc_now()} {line}\n")

    def point_path(self, index: int, kind: str) -> Path:
        return self.points / f"p{index:04d}.{kind}.parquet"

    def write_point(self, index: int, parts: dict[str, list[dict[str, Any]]], summary: dict[str, Any]) -> None:
        """All detail files first, the summary last: its presence is what makes a point complete."""
        for kind, rows in parts.items():
            write_parquet(self.point_path(index, kind), rows, schemas.DETAIL[kind])
        write_parquet(self.point_path(index, "summary"), [summary], schemas.SUMMARY)
