"""How a point that fails becomes a result: Sweep._measure_point, shared by static and continuous points."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from runners import cancel
from runners.spec import SweepSpec
from runners.sweep import Sweep


@pytest.fixture
def sweep(tmp_path: Path):
    made = Sweep(SweepSpec(model="tiny", dtype="float32", device="cpu"), tmp_path / "run", torch.device("cpu"))
    yield made
    made.sampler.stop()
    made.folder.finish("done")


def outcome(sweep: Sweep, failure: BaseException | None) -> tuple[dict, list[str]]:
    released: list[str] = []

    def measure() -> dict:
        if failure is not None:
            raise failure
        return {"point_index": 2, "batch_size": 8, "status": "ok"}

    return sweep._measure_point(2, 8, measure, lambda: released.append("released")), released


def test_a_measured_point_keeps_its_summary_and_releases_the_engine(sweep: Sweep) -> None:
    summary, released = outcome(sweep, None)
    assert summary["status"] == "ok" and released == ["released"]


@pytest.mark.parametrize("failure, status", [
    (MemoryError(), "oom"),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom"),
    (RuntimeError("Inductor: CUDA out of memory while compiling"), "oom"),  # wrapped: classified by its text
    (RuntimeError("shape mismatch"), "error"),
])
def test_a_failure_becomes_the_points_status_and_still_releases(sweep: Sweep, failure: BaseException,
                                                               status: str) -> None:
    summary, released = outcome(sweep, failure)
    assert (summary["status"], summary["point_index"], summary["batch_size"]) == (status, 2, 8)
    assert summary["error"].startswith(type(failure).__name__) and released == ["released"]


def test_a_cancel_goes_on_up_after_releasing(sweep: Sweep) -> None:
    released: list[str] = []

    def measure() -> dict:
        raise cancel.Cancelled()

    with pytest.raises(cancel.Cancelled):
        sweep._measure_point(0, 1, measure, lambda: released.append("released"))
    assert released == ["released"]
