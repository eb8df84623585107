"""The sweep around its points: model facts come from the engine, and an OOM stops the sweep with a note
named along its own axis. Modes and engines are stand-ins; the tiny model loads for real on the CPU."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from runners import sweep as sweep_module
from runners.metrics.summary import Summary
from runners.modes.context import PointContext
from runners.spec import validate
from runners.sweep import Sweep

TINY = {"model": "tiny", "dtype": "float32", "device": "cpu", "calibrate": False}


class StandInEngine:
    """An engine that changes two of the model's facts (as a quantised or sharded engine does)."""

    name = "stand-in"

    def version(self) -> str:
        return "stand-in 1"

    def facts(self) -> dict:
        return {"weight_bytes": 123, "quant_logits_cosine": 0.25}


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
    spec = validate({**TINY, **raw})
    monkeypatch.setitem(sweep_module.MODES, spec.mode, mode)
    monkeypatch.setattr(sweep_module, "make_engine", lambda name, loaded: StandInEngine())
    assert Sweep(spec, tmp_path / "run", torch.device("cpu")).run() == "done"
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert mode.ran == ran and status["stopped_early"] == note and status["points_done"] == 2


def test_model_json_states_the_engines_facts_and_points_see_them(tmp_path: Path, monkeypatch) -> None:
    seen: list[int] = []

    class Mode:
        def run_point(self, ctx: PointContext, index: int, point) -> Summary:
            seen.append(ctx.info.weight_bytes)
            return Summary(point_index=index, batch_size=point.batch_size, status="ok")

    spec = validate({**TINY, "batch_sizes": "1"})
    monkeypatch.setattr(sweep_module, "make_engine", lambda name, loaded: StandInEngine())
    monkeypatch.setitem(sweep_module.MODES, "static", Mode())
    assert Sweep(spec, tmp_path / "run", torch.device("cpu")).run() == "done"
    model = json.loads((tmp_path / "run" / "model.json").read_text())
    assert (model["weight_bytes"], model["quant_logits_cosine"], model["name"]) == (123, 0.25, "tiny")
    assert seen == [123]  # the memory split's weights are the engine's bytes
