"""Run one sweep: load the model once, build the engine, then run each planned point through its mode."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from runners import cancel
from runners.engines import devices, models, parallel
from runners.engines import make_engine
from runners.engines.base import Engine
from runners.engines.group import GroupEngine, local_engine
from runners.engines.quant_error import LAYER_ERRORS
from runners.metrics.summary import Summary
from runners.modes import MODES, endpoint
from runners.modes.context import PointContext, Stages
from runners.results import contract, outcome, schemas
from runners.results.progress import Progress
from runners.results.runfolder import RunWriter, make_out_dir, write_parquet
from runners.spec import Point, SweepSpec, point_count, points, refine
from runners.spec.parallel import world_size
from runners.spec.registry import measures_a_server
from runners.telemetry import fingerprint
from runners.telemetry.calibrate import CalibrationError, calibrate
from runners.telemetry.telemetry import Sampler


RANDOM_WEIGHTS = " (not meaningful on random weights: their near-flat logits flip on any change)"


class Sweep:
    def __init__(self, spec: SweepSpec, out: Path, device: torch.device) -> None:
        self.spec, self.device = spec, device
        total = point_count(spec)
        self.folder = RunWriter(out, points_total=total)
        self.t0 = time.perf_counter()
        self.sampler = Sampler(device, spec.telemetry_hz, self.t0, gpus=world_size(spec)).start()
        self.progress = Progress(total, self.t0)
        self.stage = Stages(self.folder, self.sampler, self.progress, spec.most_runs())
        self.outcomes: list[tuple[str, str | None]] = []  # each point's (status, error), as they ran

    def run(self) -> str:
        """Returns the final state; every finished point is on disk whatever happens after it."""
        team = None
        try:
            self.stage(-1, None, "load")
            if world_size(self.spec) > 1:  # followers load their copy while rank 0 loads its own
                team = parallel.Team(self.spec, self.device)
            ctx = (endpoint.context(self.spec, self.device, self.folder, self.sampler, self.stage)
                   if measures_a_server(self.spec.mode) else self._context(team))
            run_point = MODES[self.spec.mode].run_point
            planned = points(self.spec)
            seen: list[refine.Seen] = []
            for index, point in enumerate(planned):
                summary = self._run_point(run_point, ctx, index, point)
                seen.append(self._seen(point, summary))
                self.folder.update(points_done=index + 1)
                if summary["status"] == "oom" and self.spec.on_oom == "stop" and index + 1 < len(planned):
                    note = f"stopped after OOM at {point.label}; {point.larger} not run"
                    self.folder.update(stopped_early=note)
                    self.folder.log(note)
                    break
            self._refine(ctx, run_point, planned[0], seen)
            state, error = outcome.ending(self.outcomes)
            if error:
                self.folder.log(f"{state}: {error}")
            self.folder.finish(state, error=error)
            return state
        except cancel.Cancelled:
            self.folder.log("cancelled: finished points kept")
            self.folder.finish("cancelled")
            return "cancelled"
        except Exception as err:
            message = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            self.folder.log(f"failed: {message}")
            self.folder.finish("failed", error=message)
            return "failed"
        finally:
            if team is not None:
                team.close(graceful=self.folder.status["state"] == "done")
            self.sampler.stop()
            self.progress.close()

    def _refine(self, ctx: PointContext, run_point: Callable[[PointContext, int, Point], Summary], template: Point,
                seen: list[refine.Seen]) -> None:
        """Add points after the planned ones until the brackets are narrow or `refine_points` are spent
        (runners.spec.refine); each is numbered after the last point and marked with its reason."""
        spec = self.spec
        target = refine.parse_target(spec.refine_slo) if spec.refine_slo else None
        for added in range(spec.refine_points):
            proposal = refine.next_point(seen, target, spec.refine_tolerance, refine.is_whole(template))
            if proposal is None:
                break
            point = refine.at(template, proposal.x, proposal.reason)
            index = len(seen)
            self.progress.total = index + 1
            self.folder.update(points_total=index + 1)
            self.folder.log(f"refine ({proposal.reason}): adding {point.label}, between {proposal.lo:g} and "
                            f"{proposal.hi:g} ({added + 1} of at most {spec.refine_points})")
            seen.append(self._seen(point, self._run_point(run_point, ctx, index, point)))
            self.folder.update(points_done=index + 1)

    def _run_point(self, run_point: Callable[[PointContext, int, Point], Summary], ctx: PointContext, index: int,
                   point: Point) -> Summary:
        """Run one point and keep its outcome for the sweep's final state (runners.results.outcome)."""
        summary = run_point(ctx, index, point)
        self.outcomes.append((summary["status"], summary["error"]))
        return summary

    def _seen(self, point: Point, summary: Summary) -> refine.Seen:
        """What refinement reads of a finished point: its axis value, throughput and the SLO's latency."""
        column = refine.parse_target(self.spec.refine_slo).column if self.spec.refine_slo else None
        return refine.Seen(float(getattr(point, point.axis)), summary.ok, summary["output_tokens_per_s"],
                           summary[column] if column else None)

    def _context(self, team: parallel.Team | None) -> PointContext:
        """Load the model, build the engine, and write the run's env, model and calibration files."""
        spec = self.spec
        loaded = models.load(spec.model, spec.dtype, self.device, spec.seed, spec.quantize_lm_head)
        engine: Engine = (make_engine(spec.engine, loaded) if team is None else
                          GroupEngine(local_engine(spec, loaded, team.group), team.group, spec.tensor_parallel > 1))
        facts = engine.facts()
        layer_errors = facts.pop(LAYER_ERRORS, None)  # a quantised run's per-product errors: their own file
        info = dataclasses.replace(loaded.info, **facts)  # what the engine changed: quantised bytes, a shard
        self.folder.write_json(contract.ENV, fingerprint.collect(self.device, engine.version(), spec.tensor_parallel,
                                                                 spec.replicas))
        self.folder.write_json(contract.MODEL, dataclasses.asdict(info))
        if layer_errors:
            write_parquet(self.folder.root / contract.QUANT_ERROR, layer_errors, schemas.QUANT_ERROR)
        if spec.calibrate:
            self.stage(-1, None, "calibrate")
            try:
                # fp8 runs its products over 16 rows on fp8 tensor cores, the compute-bound ones
                matmul_dtype = torch.float8_e4m3fn if spec.dtype.startswith("fp8") else loaded.dtype
                self.folder.write_json(contract.CALIBRATION, calibrate(self.device, matmul_dtype))
            except CalibrationError as err:  # the roofline is then drawn from a stored calibration or not at all
                self.folder.log(f"calibration skipped: {err}")
        self.folder.log(f"model {info.name}: {info.params:,} params on {self.device}, engine {engine.version()}")
        for check in info.quant_accuracy or []:
            self.folder.log(f"{spec.dtype} weights ({info.weight_bytes:,} bytes), {check['rows']} rows through "
                            f"{check['kernel']}: each product's error vs bfloat16 median "
                            f"{check['layer_error_median']:.2%}, worst {check['layer_error_max']:.2%} "
                            f"({check['layer_error_worst']}); logits cosine {check['logits_cosine']:.4f} (worst "
                            f"{check['logits_cosine_min']:.4f}), greedy tokens agree {check['token_agreement']:.1%}"
                            + (RANDOM_WEIGHTS if info.source == "preset" else ""))
        return PointContext(spec, self.device, info, engine, self.folder, self.sampler, self.stage)


def run_sweep(spec: SweepSpec, out: Path) -> dict[str, Any]:
    """Check the model loads, the device and dtype, and the run folder (SpecError or ValueError before
    anything is written), then run; returns the final status record (state and error). An endpoint
    sweep's device is the GPU its telemetry samples: nothing runs on it from here."""
    models.check_loadable(spec.model)
    if measures_a_server(spec.mode):
        device = endpoint.telemetry_device(spec)
    else:
        device = devices.resolve(spec.device)
        devices.use(device)
        devices.check_dtype(device, spec.dtype)
        devices.check_ranks(device, world_size(spec), "tensor_parallel" if spec.tensor_parallel > 1 else "replicas")
    make_out_dir(out)
    contract.write_json(out / contract.SPEC, {**spec.to_dict(), "run_id": out.name, "created_at": contract.timestamp()})
    sweep = Sweep(spec, out, device)
    sweep.run()
    return sweep.folder.status
