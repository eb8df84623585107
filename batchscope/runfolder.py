"""Read (and, for the app's few writes, atomically write) a run folder as docs/run-folder.md defines it.

Every reader here tolerates half-written or corrupt files: it returns None and records a warning that
names the file, because one bad file must never take a page or an import down.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from runners.results import contract


class RunFolder:
    """One run folder; the run id is its basename. Collects warnings about unreadable files."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.run_id = self.path.name
        self.warnings: list[str] = []

    def looks_like_run(self) -> bool:
        """True when the folder holds a spec.json or status.json (readable or not)."""
        return (self.path / contract.SPEC).is_file() or (self.path / contract.STATUS).is_file()

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
        return self.read_json(contract.SPEC)

    def status(self) -> dict[str, Any] | None:
        """status.json; a field of the wrong type (runners.results.contract.status_problems) is dropped to null with
        a warning, so the DB and the job manager see only values the contract allows."""
        status = self.read_json(contract.STATUS)
        for key, problem in contract.status_problems(status or {}).items():
            self.warnings.append(f"{self.path / contract.STATUS}: {problem}; ignored")
            status[key] = None
        return status

    def env(self) -> dict[str, Any] | None:
        return self.read_json(contract.ENV)

    def model(self) -> dict[str, Any] | None:
        return self.read_json(contract.MODEL)

    def calibration(self) -> dict[str, Any] | None:
        return self.read_json(contract.CALIBRATION)

    def quant_error(self) -> pa.Table | None:
        """quant_error.parquet (quantised runs only), or None."""
        return self._read_parquet(self.path / contract.QUANT_ERROR)

    def write_status(self, status: dict[str, Any]) -> None:
        """Replace status.json atomically (the app does this only while no runner owns the folder)."""
        contract.write_json(self.path / contract.STATUS, status)

    def point_file(self, point_index: int, kind: str) -> Path:
        return self.path / contract.POINTS / contract.point_file(point_index, kind)

    def complete_points(self) -> list[int]:
        """Indices of points whose summary file exists (the runner writes it last), ascending; a summary
        whose index no point can have is skipped with a warning."""
        points_dir = self.path / contract.POINTS
        if not points_dir.is_dir():
            return []
        found = []
        for entry in points_dir.iterdir():
            index = contract.summary_index(entry.name)
            if index is not None and index > contract.MAX_INT32:
                self.warnings.append(f"{entry}: point index {index} is past the largest a run can have; skipped")
            elif index is not None:
                found.append(index)
        return sorted(found)

    def read_point_table(self, point_index: int, kind: str) -> pa.Table | None:
        """One Parquet file of a point; None when missing, None plus a warning when it does not read."""
        return self._read_parquet(self.point_file(point_index, kind))

    def _read_parquet(self, file: Path) -> pa.Table | None:
        if not file.exists():
            return None
        try:
            return pq.read_table(file)
        except (pa.ArrowException, OSError) as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            self.warnings.append(f"{file}: unreadable Parquet ({first_line}); skipped")
            return None
