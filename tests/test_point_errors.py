"""How a point that fails becomes a result: PointContext.measure, shared by every mode."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from runners import cancel
from runners.engines import models
from runners.metrics.summary import Summary
from runners.modes.context import PointContext, StoreClock
from runners.spec import SweepSpec
from runners.sweep import Sweep


@pytest.fixture
def ctx(tmp_path: Path):
    spec = SweepSpec(model="tiny", dtype="float32", device="cpu")
    made = Sweep(spec, tmp_path / "run", torch.device("cpu"))
    info = models.describe("tiny", models.model_config("tiny"), "float32")
    yield PointContext(spec, torch.device("cpu"), info, None, made.folder, made.sampler, made.stage)  # no engine
    made.sampler.stop()
    made.folder.finish("done")


def outcome(ctx: PointContext, failure: BaseException | None) -> tuple[Summary, list[str]]:
    released: list[str] = []

    def measure() -> Summary:
        if failure is not None:
            raise failure
        return Summary(point_index=2, batch_size=8, status="ok")

    clock = StoreClock()
    summary = ctx.measure(2, 8, measure, lambda: released.append("released"), clock)
    # the release and the collection are timed for the log whatever happened; a CPU has no cache to empty
    assert list(clock.parts) == ["release", "gc"]
    return summary, released


def test_a_measured_point_keeps_its_summary_and_releases_the_engine(ctx: PointContext) -> None:
    summary, released = outcome(ctx, None)
    assert summary["status"] == "ok" and released == ["released"]


def cpu_allocation_failure() -> RuntimeError:
    """What torch raises when the host cannot give a huge batch its memory (an exbibyte here)."""
    try:
        torch.empty(1 << 60, dtype=torch.uint8)
    except RuntimeError as err:
        return err
    raise AssertionError("an exbibyte was allocated")


@pytest.mark.parametrize("failure, status", [
    (MemoryError(), "oom"),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom"),
    (RuntimeError("Inductor: CUDA out of memory while compiling"), "oom"),  # wrapped: classified by its text
    (cpu_allocation_failure(), "oom"),  # "DefaultCPUAllocator: can't allocate memory"
    (RuntimeError("shape mismatch"), "error"),
])
def test_a_failure_becomes_the_points_status_and_still_releases(ctx: PointContext, failure: BaseException,
                                                               status: str) -> None:
    summary, released = outcome(ctx, failure)
    assert (summary["status"], summary["point_index"], summary["batch_size"]) == (status, 2, 8)
    assert summary["error"].startswith(type(failure).__name__) and released == ["released"]


def test_a_cancel_goes_on_up_after_releasing(ctx: PointContext) -> None:
    released: list[str] = []

    def measure() -> Summary:
        raise cancel.Cancelled()

    with pytest.raises(cancel.Cancelled):
        ctx.measure(0, 1, measure, lambda: released.append("released"), StoreClock())
    assert released == ["released"]
