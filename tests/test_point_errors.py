"""How a point that fails becomes a result: PointContext.measure, shared by every mode; and how an OOM
stops a sweep, named along its own axis."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from runners import cancel, models, sweep as sweep_module
from runners.metrics.summary import Summary
from runners.modes.context import PointContext
from runners.spec import SweepSpec, validate
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

    return ctx.measure(2, 8, measure, lambda: released.append("released")), released


def test_a_measured_point_keeps_its_summary_and_releases_the_engine(ctx: PointContext) -> None:
    summary, released = outcome(ctx, None)
    assert summary["status"] == "ok" and released == ["released"]


@pytest.mark.parametrize("failure, status", [
    (MemoryError(), "oom"),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom"),
    (RuntimeError("Inductor: CUDA out of memory while compiling"), "oom"),  # wrapped: classified by its text
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
        ctx.measure(0, 1, measure, lambda: released.append("released"))
    assert released == ["released"]


class OomAtSecondPoint:
    """A mode whose second point runs out of memory."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def run_point(self, ctx: PointContext, index: int, point) -> Summary:
        self.ran.append(point.label)
        return Summary(point_index=index, batch_size=point.batch_size, status="oom" if index == 1 else "ok")


@pytest.mark.parametrize("raw, ran, note", [
    ({"batch_sizes": "1,2,4"}, ["batch 1", "batch 2"], "stopped after OOM at batch 2; larger batches not run"),
    ({"mode": "continuous", "engine": "fast", "concurrency": 4, "max_num_seqs": "1,2,4"},
     ["max_num_seqs 1", "max_num_seqs 2"], "stopped after OOM at max_num_seqs 2; larger values not run"),
    ({"mode": "continuous", "engine": "fast", "arrival": "poisson:1,2,4"},
     ["arrival_rate 1", "arrival_rate 2"], "stopped after OOM at arrival_rate 2; larger values not run"),
])
def test_an_oom_stops_the_sweep_and_names_its_axis(tmp_path: Path, monkeypatch, raw: dict, ran: list[str],
                                                   note: str) -> None:
    mode = OomAtSecondPoint()
    spec = validate({"model": "tiny", "dtype": "float32", "device": "cpu", "calibrate": False, **raw})
    monkeypatch.setitem(sweep_module.MODES, spec.mode, mode)
    assert Sweep(spec, tmp_path / "run", torch.device("cpu")).run() == "done"
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert mode.ran == ran and status["stopped_early"] == note and status["points_done"] == 2
