"""The interface between the job manager and a backend: a `Backend` launches and reattaches runs, and a
`Sweep` is one launched runner the manager watches, stops and settles the same way wherever it runs."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

EXIT_REJECTED_SPEC = 2


class LaunchError(Exception):
    """A run could not be started; the message says why and the run is stored `failed` with it."""


class Sweep(Protocol):
    """One launched runner."""

    def exited(self) -> bool:
        """True once the runner has ended and the app's run folder holds everything it wrote."""

    def sync(self) -> None:
        """Bring the app's run folder up to what the runner has written (nothing to do when the runner
        writes it itself); called before every ingest."""

    def stop(self, force: bool) -> None:
        """force=False: SIGTERM (the runner stops at its next step, keeping finished points); True: SIGKILL."""

    def ending(self) -> tuple[str, str | None]:
        """(state, error) for a runner that exited without writing a final state and was not cancelled."""

    def close(self) -> None:
        """Release what the sweep held once the app has all its files."""


class Backend(Protocol):
    """Launches runs and finds the ones an earlier app process launched."""

    queues_itself: bool  # True: runs go to the backend's own scheduler at once, each in a lane of its own

    def lane(self, run_id: str, spec: dict[str, Any]) -> str:
        """The job manager's queue the run waits in (one runs at a time per lane)."""

    def launch(self, run_id: str, folder: Path, spec: dict[str, Any]) -> Sweep:
        """Start the queued run in `folder`; LaunchError when it cannot."""

    def reattach(self, run_id: str, folder: Path, status: dict[str, Any]) -> Sweep | None:
        """The runner an earlier app process launched for this run, if it still goes (or still waits)."""

    def gone(self, status: dict[str, Any]) -> str:
        """The error of a run stored `running` whose runner is gone."""


def exit_outcome(code: int | None, reason: str | None, runner: str) -> tuple[str, str | None]:
    """How a runner that ended without a final state ended, from its exit code and its last stderr line:
    `failed` when it said why (a rejected spec in its own words), else `interrupted`. `runner` names it."""
    if code is not None and code > 0:
        reason = reason or f"runner exited with code {code}"
        return "failed", reason if code == EXIT_REJECTED_SPEC else f"{reason} (exit code {code})"
    ending = f"killed by signal {-code}" if code is not None and code < 0 else "ended"
    return "interrupted", f"{runner} {ending} without finishing"
