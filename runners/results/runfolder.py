"""The runner's side of the run folder (runners.results.contract): status with a heartbeat, the log, and each
point's files, every one written atomically."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from runners.results import contract, schemas

HEARTBEAT_S = 2.0


def write_parquet(path: Path, rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    """Rows → Parquet; a key the schema lacks is an error (it would be dropped silently), and an empty
    list still writes a file with the schema."""
    unknown = sorted({key for row in rows for key in row} - set(schema.names))
    if unknown:
        raise KeyError(f"{path.name}: columns not in its schema (runners/results/schemas.py): {', '.join(unknown)}")
    table = pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()
    contract.write_atomic(path, lambda handle: pq.write_table(table, handle, compression="zstd"))


def check_out_dir(out: Path) -> None:
    """Refuse to write over another run: the folder must be new, empty, or hold only the request the app
    queued for this runner (its spec.json and status.json)."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a directory")
    if out.is_dir():
        # dot-files are in-flight atomic writes (the app records the pid right after launching us)
        names = {p.name for p in out.iterdir() if not p.name.startswith(".")}
        leftovers = names - contract.APP_WRITTEN
        if leftovers:
            raise ValueError(f"--out {out} already holds a run ({', '.join(sorted(leftovers)[:3])}); "
                             f"choose a new folder")
        other = _not_queued(out / contract.STATUS) if names else None
        if other:
            raise ValueError(f"--out {out} holds another run ({other}); only a folder the app queued can be "
                             f"reused: choose a new folder")


def _not_queued(status_file: Path) -> str | None:
    """None when status.json is the app's request for this runner (queued, or running under our pid once
    the app has recorded it); else what it holds instead."""
    try:
        status = json.loads(status_file.read_text())
    except FileNotFoundError:
        return "no status.json"
    except (OSError, ValueError):
        return "an unreadable status.json"
    state = status.get("state") if isinstance(status, dict) else None
    if state == "queued" or (state == "running" and status.get("pid") == os.getpid()):
        return None
    return f"state {state}"


def make_out_dir(out: Path) -> None:
    """Create the run folder and its parents; a path that cannot be a folder is bad input, in one line."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out {out}: cannot create the run folder ({err.strerror or err})") from None


class RunWriter:
    """One sweep's folder; owns status.json and keeps its heartbeat fresh from a daemon thread."""

    def __init__(self, out: Path, points_total: int) -> None:
        self.root = out
        self.points = out / contract.POINTS
        self.points.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.status = contract.new_status(out.name, "running", points_total, pid=os.getpid(),
                                          started_at=contract.timestamp())
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
        self.update()
        self._beat.start()

    def update(self, **changes: Any) -> None:
        with self._lock:
            self.status.update(changes)
            self.status["heartbeat_at"] = contract.timestamp()
            contract.write_json(self.root / contract.STATUS, self.status)

    def finish(self, state: str, error: str | None = None) -> None:
        self._stop.set()
        self.update(state=state, error=error, current=None, finished_at=contract.timestamp())

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self.update()

    def write_json(self, name: str, value: Any) -> None:
        contract.write_json(self.root / name, value)

    def log(self, line: str) -> None:
        with open(self.root / contract.LOG, "a") as f:
            f.write(f"{contract.timestamp()} {line}\n")

    def write_point(self, index: int, parts: dict[str, list[dict[str, Any]]], summary: dict[str, Any]) -> None:
        """All detail files first, the summary last: its presence is what makes a point complete."""
        for kind, rows in parts.items():
            write_parquet(self.points / contract.point_file(index, kind), rows, schemas.DETAIL[kind])
        write_parquet(self.points / contract.point_file(index, "summary"), [summary], schemas.SUMMARY)
