"""Read (and, for the app's few writes, atomically write) a run folder as docs/run-folder.md defines it.

Every reader here tolerates half-written or corrupt files: it returns None and records a warning that
names the file, because one bad file must never take a page or an import down.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

POINT_FILE_KINDS = ("summary", "repeats", "requests", "steps", "samples")
TERMINAL_STATES = frozenset({"done", "failed", "cancelled", "interrupted"})
_SUMMARY_NAME = re.compile(r"^p(\d{4,})\.summary\.parquet$")


def utc_now() -> datetime:
    """Now as a naive UTC datetime, the form the DB stores timestamps in."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def parse_utc(value: str | datetime | date | None) -> datetime | None:
    """An ISO-8601 string (the contract's timestamps) or datetime as naive UTC; None if absent or garbled."""
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


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON through a temp file in the same folder and os.replace, so readers never see half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=True, default=str)
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


class RunFolder:
    """One run folder; the run id is its basename. Collects warnings about unreadable files."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.run_id = self.path.name
        self.warnings: list[str] = []

    def looks_like_run(self) -> bool:
        """True when the folder holds a spec.json or status.json (readable or not)."""
        return (self.path / "spec.json").is_file() or (self.path / "status.json").is_file()

    def read_json(self, name: str) -> dict[str, Any] | None:
        """The JSON object in `name`, or None when missing; a corrupt file adds a warning and gives None."""
        file = self.path / name
        try:
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as error:
            self.warnings.append(f"{file}: unreadable ({error.strerror or error}); skipped")
            return None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            self.warnings.append(f"{file}: not valid JSON ({error.msg} at line {error.lineno}); skipped")
            return None
        if not isinstance(data, dict):
            self.warnings.append(f"{file}: expected a JSON object, found {type(data).__name__}; skipped")
            return None
        return data

    def spec(self) -> dict[str, Any] | None:
        return self.read_json("spec.json")

    def status(self) -> dict[str, Any] | None:
        return self.read_json("status.json")

    def env(self) -> dict[str, Any] | None:
        return self.read_json("env.json")

    def model(self) -> dict[str, Any] | None:
        return self.read_json("model.json")

    def calibration(self) -> dict[str, Any] | None:
        return self.read_json("calibration.json")

    def write_status(self, status: dict[str, Any]) -> None:
        """Replace status.json atomically (the app does this only while no runner owns the folder)."""
        write_json_atomic(self.path / "status.json", status)

    def point_file(self, point_index: int, kind: str) -> Path:
        return self.path / "points" / f"p{point_index:04d}.{kind}.parquet"

    def complete_points(self) -> list[int]:
        """Indices of points whose summary file exists (the runner writes it last), ascending."""
        points_dir = self.path / "points"
        if not points_dir.is_dir():
            return []
        found = (_SUMMARY_NAME.match(entry.name) for entry in points_dir.iterdir())
        return sorted(int(match.group(1)) for match in found if match)

    def read_point_table(self, point_index: int, kind: str) -> pa.Table | None:
        """One Parquet file of a point; None when missing, None plus a warning when it does not read."""
        file = self.point_file(point_index, kind)
        if not file.exists():
            return None
        try:
            return pq.read_table(file)
        except (pa.ArrowException, OSError) as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            self.warnings.append(f"{file}: unreadable Parquet ({first_line}); skipped")
            return None
