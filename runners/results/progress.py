"""A one-line terminal progress bar: points done, the current point, elapsed time."""
from __future__ import annotations

import sys
import time


class Progress:
    """Redraws in place on a terminal; on a pipe or a log file, prints one line per change."""

    def __init__(self, total: int, t0: float, stream=sys.stderr, width: int = 20) -> None:
        self.total, self.t0, self.stream, self.width = total, t0, stream, width
        self.tty = stream.isatty()

    def show(self, index: int, label: str | None, stage: str, repeat: int | None, most: int) -> None:
        """`label` names the point on the sweep's own axis ("concurrency 32"); a point measures up to
        `most` runs, stopping earlier once its throughput is known."""
        done = max(index, 0)
        filled = round(self.width * done / self.total) if self.total else self.width
        elapsed = time.perf_counter() - self.t0
        where = stage if label is None else f"{label} {stage}"
        if stage == "measure" and repeat is not None:
            where += f" run {repeat + 1} (at most {most})"
        line = (f"[{'#' * filled}{'-' * (self.width - filled)}] {done}/{self.total} points | {where} | "
                f"{int(elapsed // 60):02d}:{int(elapsed % 60):02d} elapsed")
        self.stream.write(f"\r{line:<100}" if self.tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
