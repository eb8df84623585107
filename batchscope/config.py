"""Where BatchScope keeps its data, read from the environment at call time so tests and CLIs can redirect it."""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _path_from_env(variable: str, default: Path) -> Path:
    value = os.environ.get(variable)
    return Path(value).expanduser() if value else default


def db_path() -> Path:
    """The DuckDB history file: $BATCHSCOPE_DB, else data/batchscope.duckdb in the repository."""
    return _path_from_env("BATCHSCOPE_DB", REPO_ROOT / "data" / "batchscope.duckdb")


def db_wait_s() -> float:
    """How long opening the DB waits out another process's hold on it (an import, a starting app) before
    saying so: $BATCHSCOPE_DB_WAIT_S seconds, else 30."""
    value = os.environ.get("BATCHSCOPE_DB_WAIT_S")
    return float(value) if value else 30.0


def runs_dir() -> Path:
    """Where the job manager creates run folders: $BATCHSCOPE_RUNS, else data/runs."""
    return _path_from_env("BATCHSCOPE_RUNS", REPO_ROOT / "data" / "runs")


def demo_dir() -> Path:
    """The shipped demo run folders (real GPU sweeps), imported with demo=True: $BATCHSCOPE_DEMO, else data/demo."""
    return _path_from_env("BATCHSCOPE_DEMO", REPO_ROOT / "data" / "demo")


def runner_python() -> str:
    """The interpreter that runs `python -m runners`: $BATCHSCOPE_RUNNER_PYTHON, else this one."""
    return os.environ.get("BATCHSCOPE_RUNNER_PYTHON") or sys.executable


def ray_address() -> str | None:
    """The Ray cluster sweeps may be sent to: $BATCHSCOPE_RAY_ADDRESS (`ray://head:10001`, `head:6379`, or
    `auto` on a cluster node); None when unset, and then nothing imports ray."""
    return os.environ.get("BATCHSCOPE_RAY_ADDRESS") or None


def model_roots() -> list[Path]:
    """Folders a local checkpoint may come from (docs/design.md §6): $BATCHSCOPE_MODEL_ROOTS (os.pathsep-separated),
    else the user's home and the repository's data/models."""
    value = os.environ.get("BATCHSCOPE_MODEL_ROOTS")
    if value:
        return [Path(p).expanduser() for p in value.split(os.pathsep) if p]
    return [Path.home(), REPO_ROOT / "data" / "models"]
