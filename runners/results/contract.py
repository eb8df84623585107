"""The run folder's contract (docs/run-folder.md) in one place: file names, states, the status record,
timestamps and the atomic write. The runner writes by it and the app reads (and queues) by it, so it
imports neither torch nor pyarrow: the app must start without them.
"""
from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Callable
from datetime import date, datetime, timezone
from pathlib import Path
from typing import IO, Any

SPEC, STATUS, ENV, MODEL, CALIBRATION, LOG = (
    "spec.json", "status.json", "env.json", "model.json", "calibration.json", "log.txt")
POINTS = "points"
SERVER_LOG = "server.log"  # the output of servers an endpoint sweep restarts (docs/run-folder.md)
QUANT_ERROR = "quant_error.parquet"  # a quantised run's per-product error against bfloat16 (docs/run-folder.md)
APP_WRITTEN = frozenset({SPEC, STATUS})  # what the app may leave in a folder before the runner starts
# spec.json keys the app adds that are no sweep option (the runner ignores them): its id and time, and the
# Ray cluster GPU type a run was sent to (docs/run-folder.md)
APP_SPEC_KEYS = frozenset({"run_id", "created_at", "cluster_gpu"})
TERMINAL_STATES = frozenset({"done", "failed", "cancelled", "interrupted"})
STATES = frozenset({"queued", "running", *TERMINAL_STATES})
MAX_INT32 = 2**31 - 1  # point indices, counts and pids are int32 in the Parquet schemas and the history DB
_SUMMARY_FILE = re.compile(r"^p(\d{4,})\.summary\.parquet$")


def point_file(index: int, kind: str) -> str:
    """A point file's name inside `points/`."""
    return f"p{index:04d}.{kind}.parquet"


def summary_index(name: str) -> int | None:
    """The point index of a summary file's name; None for any other file."""
    match = _SUMMARY_FILE.match(name)
    return int(match.group(1)) if match else None


def new_status(run_id: str, state: str, points_total: int, pid: int | None = None,
               started_at: str | None = None) -> dict[str, Any]:
    """A status.json record with every field, as a queued request (app) or a starting run (runner)."""
    return {"state": state, "run_id": run_id, "pid": pid, "points_done": 0, "points_total": points_total,
            "current": None, "started_at": started_at, "heartbeat_at": started_at, "finished_at": None,
            "error": None, "stopped_early": None}


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INT32


_STATUS_VALUES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "state": (lambda value: value in STATES, "not a run state"),
    "run_id": (lambda value: isinstance(value, str), "not text"),
    "pid": (lambda value: _count(value) and value > 0, "not a process id"),
    "points_done": (_count, "not a count"),
    "points_total": (_count, "not a count"),
    "current": (lambda value: isinstance(value, dict), "not an object"),
    **{key: (lambda value: isinstance(value, str), "not a timestamp")
       for key in ("started_at", "heartbeat_at", "finished_at")},
    "error": (lambda value: isinstance(value, str), "not text"),
    "stopped_early": (lambda value: isinstance(value, str), "not text"),
    "node": (lambda value: isinstance(value, str), "not text"),
}


def status_problems(status: dict[str, Any]) -> dict[str, str]:
    """The fields of a status record read from a file whose value is not what new_status's field holds
    (null is always allowed), each with a line that says so."""
    return {key: f"{key} {status[key]!r} is {what}" for key, (allowed, what) in _STATUS_VALUES.items()
            if status.get(key) is not None and not allowed(status[key])}


def utc_now() -> datetime:
    """Now as a naive UTC datetime: what the app computes with and stores."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def timestamp(moment: datetime | None = None) -> str:
    """The contract's time format: ISO-8601 UTC with milliseconds (now when no moment is given)."""
    return (moment or utc_now()).replace(tzinfo=timezone.utc).isoformat(timespec="milliseconds")


def parse_utc(value: str | datetime | date | None) -> datetime | None:
    """A contract timestamp (or a datetime) as naive UTC; None if absent or garbled."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    else:
        try:
            moment = datetime.fromisoformat(str(value))
        except ValueError:
            return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment


def write_atomic(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """`write` fills a temp file beside `path`, which is synced and renamed over it: a reader sees the
    old file or the whole new one, and a crash never leaves a torn file. Temp names start with a dot."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(temp, "xb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def write_json(path: Path, value: Any) -> None:
    write_atomic(path, lambda handle: handle.write(json.dumps(value, indent=2, default=str).encode()))
