"""Run one sweep: load the model once, then for each batch size set up, warm up, measure, write."""
from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from runners import cancel, contract, devices, fingerprint, memory, models, parallel
from runners.calibrate import CalibrationError, calibrate
from runners.engines import make_engine
from runners.engines.base import Batch, Engine
from runners.engines.group import GroupEngine, local_engine
from runners.metrics import RepeatResult, summarise
from runners.progress import Progress
from runners.replicas import repeat_result
from runners.runfolder import RunWriter
from runners.schemas import SUMMARY, UTIL_MEANS
from runners.spec import SweepSpec, point_count
from runners.spec.continuous import points as continuous_points
from runners.spec.parallel import world_size
from runners.telemetry import Sampler, rss_bytes

OOM_ERRORS = (torch.OutOfMemoryError, MemoryError)


class Sweep:
    def __init__(self, spec: SweepSpec, out: Path, device: torch.device) -> None:
        self.spec, self.device = spec, device
        self.folder = RunWriter(out, points_total=point_count(spec))
        self.t0 = time.perf_counter()
        self.progress = Progress(point_count(spec), self.t0)
        self.sampler = Sampler(device, spec.telemetry_hz, self.t0, gpus=world_size(spec)).start()

    def run(self) -> str:
        """Returns the final state; every finished point is on disk whatever happens after it."""
        team = None
        try:
            self._stage(-1, None, "load")
            if world_size(self.spec) > 1:  # followers load their copy while rank 0 loads its own
                team = parallel.Team(self.spec, self.device)
            loaded = models.load(self.spec.model, self.spec.dtype, self.device, self.spec.seed)
            engine = (make_engine(self.spec.engine, loaded) if team is None else
                      GroupEngine(local_engine(self.spec, loaded, team.group), team.group, self.spec.tensor_parallel > 1))
            self._write_run_files(loaded, engine)
            continuous = self.spec.mode == "continuous"
            points = continuous_points(self.spec) if continuous else self.spec.batch_sizes
            for index, point in enumerate(points):
                if continuous:
                    from runners.continuous_sweep import run_point

                    summary = run_point(self, index, point, loaded, engine)
                else:
                    summary = self._point(index, point, loaded, engine)
                self.folder.update(points_done=index + 1)
                if summary["status"] == "oom" and self.spec.on_oom == "stop" and index + 1 < len(points):
                    batch_size = summary["batch_size"]
                    note = f"stopped after OOM at batch {batch_size}; larger batches not run"
                    self.folder.update(stopped_early=note)
                    self.folder.log(note)
                    break
            self.folder.finish("done")
            return "done"
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

    def _stage(self, index: int, batch_size: int | None, stage: str, repeat: int | None = None) -> None:
        self.sampler.set_context(index, stage)
        self.folder.update(current={"point_index": index if index >= 0 else None, "batch_size": batch_size,
                                    "stage": stage, "repeat": repeat})
        self.progress.show(index, batch_size, stage, repeat, self.spec.repeats)

    def _write_run_files(self, loaded: models.LoadedModel, engine: Engine) -> None:
        env = fingerprint.collect(self.device, engine.version(), self.spec.tensor_parallel, self.spec.replicas)
        self.folder.write_json(contract.ENV, env)
        self.folder.write_json(contract.MODEL, json.loads(loaded.info.to_json()))
        if self.spec.calibrate:
            self._stage(-1, None, "calibrate")
            try:
                matmul_dtype = torch.float8_e4m3fn if self.spec.dtype == "fp8-dynamic" else loaded.dtype
                self.folder.write_json(contract.CALIBRATION, calibrate(self.device, matmul_dtype))
            except CalibrationError as err:  # the roofline is then drawn from a stored calibration or not at all
                self.folder.log(f"calibration skipped: {err}")
        self.folder.log(f"model {loaded.info.name}: {loaded.info.params:,} params on {self.device}, "
                        f"engine {engine.version()}")
        if loaded.info.quant_logits_rel_error is not None:
            self.folder.log(f"{self.spec.dtype} weights: {loaded.info.weight_bytes:,} bytes; last-position logits "
                            f"vs bfloat16 relative error {loaded.info.quant_logits_rel_error:.4f}")

    def _batch(self, batch_size: int, repeat: int, vocab: int) -> Batch:
        prompts, outputs = self.spec.request_lengths(batch_size, repeat)
        gen = torch.Generator().manual_seed(self.spec.seed * 1_000_003 + batch_size * 1_009 + repeat + 17)
        ids = torch.randint(1, vocab, (sum(prompts),), generator=gen).tolist()
        rows, start = [], 0
        for p in prompts:
            rows.append(ids[start:start + p])
            start += p
        return Batch(prompt_ids=rows, output_lens=outputs)

    def _point(self, index: int, batch_size: int, loaded: models.LoadedModel, engine: Engine) -> dict[str, Any]:
        spec = self.spec
        batches = {r: self._batch(batch_size, r, loaded.info.vocab) for r in spec.repeat_indices()}
        self._reset_memory_stats()
        rss_before = rss_bytes()
        results: list[RepeatResult] = []
        windows: list[tuple[int, float, float, float]] = []
        setup_s = 0.0

        def measure() -> dict[str, Any]:
            nonlocal setup_s
            self._stage(index, batch_size, "setup")
            setup_s = engine.setup(batch_size, max(max(b.prompt_lens) for b in batches.values()),
                                   max(max(b.output_lens) for b in batches.values()))
            for repeat, batch in batches.items():
                self._stage(index, batch_size, "warmup" if repeat < 0 else "measure", max(repeat, 0))
                host_start = time.perf_counter()
                gen = engine.generate(batch)
                if repeat >= 0:
                    results.append(repeat_result(index, repeat, batch, gen))
                    windows.append((repeat, host_start, host_start + gen.token_ms[0] / 1000,
                                    host_start + gen.token_ms[-1] / 1000))
            return {**summarise(index, batch_size, results, spec.warmup),
                    **self._memory(loaded, results, rss_before)}

        summary = self._measure_point(index, batch_size, measure, engine.release)
        if summary["status"] != "ok":
            results = []
        summary.update(setup_ms=setup_s * 1000.0, tensor_parallel=spec.tensor_parallel, replicas=spec.replicas)
        done = f" {summary['output_tokens_per_s']:.1f} out tok/s" if summary["status"] == "ok" else ""
        return self._write_point(index, summary, results, windows, f"batch {batch_size}", done)

    def _write_point(self, index: int, summary: dict[str, Any], repeats: list, windows: list[tuple[int, float, float, float]],
                     what: str, done: str, requests_per_repeat: int | None = None) -> dict[str, Any]:
        """Utilisation from the point's samples, then its files and a log line; `repeats` are the
        measured repeats (static or continuous: each has `requests`, `steps` and `row`)."""
        samples = self._tag_samples(self.sampler.drain(), windows)
        summary.update(_utilisation(samples, summary, windows, requests_per_repeat))
        for row in samples:
            del row["stage"]
        parts = {"samples": samples}
        if repeats:
            parts.update(requests=[r for rep in repeats for r in rep.requests],
                         steps=[s for rep in repeats for s in rep.steps], repeats=[rep.row for rep in repeats])
        self.folder.write_point(index, parts, {name: summary.get(name) for name in SUMMARY.names})
        self.folder.log(f"point {index} {what}: {summary['status']}"
                        + (done if summary["status"] == "ok" else f" {summary['error']}"))
        return summary

    def _measure_point(self, index: int, batch_size: int, measure: Callable[[], dict[str, Any]],
                       release: Callable[[], None]) -> dict[str, Any]:
        """`measure()`'s summary; an OOM or error becomes the point's status instead, a cancel goes on up,
        and the engine's buffers are released whatever happened (static and continuous points alike)."""
        try:
            return measure()
        except OOM_ERRORS as err:
            return self._failed(index, batch_size, "oom", err)
        except cancel.Cancelled:
            self.sampler.drain()
            raise
        except RuntimeError as err:  # compilers wrap an OOM in their own errors: classify by the text
            return self._failed(index, batch_size, "oom" if "out of memory" in str(err).lower() else "error", err)
        finally:
            release()
            self._free()

    def _failed(self, index: int, batch_size: int, status: str, err: BaseException) -> dict[str, Any]:
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        return {"point_index": index, "batch_size": batch_size, "status": status,
                "error": f"{type(err).__name__}: {text}", "repeats": 0, "warmup": self.spec.warmup}

    def _reset_memory_stats(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)

    def _free(self) -> None:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _memory(self, loaded: models.LoadedModel, results: list[RepeatResult], rss_before: int) -> dict[str, Any]:
        info = loaded.info
        kv_allocated = max(r.gen.kv_allocated_bytes for r in results)
        kv_used = max(sum(r.batch.prompt_lens) + sum(r.batch.output_lens) for r in results) * info.kv_bytes_per_token
        return self._split(info, kv_allocated, kv_used, rss_before)

    def _split(self, info: models.ModelInfo, kv_allocated: int, kv_used: int, rss_before: int) -> dict[str, Any]:
        """The memory split from the allocator's peaks on a GPU, or from the RSS growth on a CPU."""
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            return memory.split(capacity=total, weights=info.weight_bytes, kv_allocated=kv_allocated,
                                kv_used=kv_used, peak_allocated=torch.cuda.max_memory_allocated(self.device),
                                reserved=torch.cuda.max_memory_reserved(self.device), device_used=total - free)
        rss_peak = self.sampler.peak_rss()
        return memory.split(capacity=fingerprint.total_ram(), weights=info.weight_bytes,
                            kv_allocated=kv_allocated, kv_used=kv_used,
                            peak_allocated=info.weight_bytes + max(0, rss_peak - rss_before),  # RSS growth holds KV too
                            reserved=None, device_used=None)

    @staticmethod
    def _tag_samples(rows: list[dict[str, Any]], windows: list[tuple[int, float, float, float]]) -> list[dict[str, Any]]:
        """Repeat and phase from the device timeline: prefill until the first token, decode after.

        The host-side `stage` stays on each row until the point is summarised, then is dropped.
        """
        for row in rows:
            stage, host_t = row["stage"], row.pop("host_t")
            row["repeat"], row["phase"] = -1, "idle" if stage == "measure" else stage
            for repeat, start, prefill_end, end in windows:
                if start <= host_t <= end:
                    row["repeat"] = repeat
                    row["phase"] = "prefill" if host_t <= prefill_end else "decode"
                    break
        return rows


def _utilisation(samples: list[dict[str, Any]], summary: dict[str, Any],
                 windows: list[tuple[int, float, float, float]], requests_per_repeat: int | None = None
                 ) -> dict[str, Any]:
    """Means over the samples inside this point's measured repeats (and over decode only; with several
    GPUs, over all of them); energy = each GPU's mean power inside a repeat × the repeat's length, summed.

    Samples from the stages around the repeats (setup, graph capture, warm-up, the previous point's
    tail) never count. A repeat shorter than the sampling period (a tiny CPU batch) may hold no sample:
    then this point's measure-stage samples stand in for the means, and energy is left unknown.
    Energy per output token counts `requests_per_repeat` requests per repeat (the batch size when None).
    """
    point = summary["point_index"]
    own = [s for s in samples if s["point_index"] == point]
    in_repeats = [s for s in own if s["repeat"] >= 0]
    measured = in_repeats or [s for s in own if s["stage"] == "measure"]
    decode = [s for s in measured if s["phase"] == "decode"]

    def mean(rows: list[dict[str, Any]], key: str) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None]
        return statistics.fmean(values) if values else None

    out: dict[str, Any] = {name: mean(measured, name) for name in UTIL_MEANS}
    out.update({f"{name}_decode": mean(decode, name) for name in UTIL_MEANS[:6]})
    out["cpu_pct"] = mean(measured, "cpu_pct")
    out["rss_bytes_max"] = max((s["rss_bytes"] for s in measured), default=None)
    out["util_source"] = samples[0]["source"] if samples else None
    out["energy_j"] = _energy(in_repeats, windows)
    per_repeat = summary.get("batch_size", 0) if requests_per_repeat is None else requests_per_repeat
    tokens = (summary.get("output_len_mean") or 0) * per_repeat * (summary.get("repeats") or 0)
    out["energy_per_output_token_j"] = out["energy_j"] / tokens if out["energy_j"] is not None and tokens else None
    return out


def _energy(in_repeats: list[dict[str, Any]], windows: list[tuple[int, float, float, float]]) -> float | None:
    """Σ over repeats and GPUs of mean power × repeat length; None when any repeat has no power sample."""
    total = 0.0
    for repeat, start, _, end in windows:
        rows = [s for s in in_repeats if s["repeat"] == repeat and s["power_w"] is not None]
        if not rows:
            return None
        for gpu in {s.get("gpu_index") for s in rows}:
            total += statistics.fmean(s["power_w"] for s in rows if s.get("gpu_index") == gpu) * (end - start)
    return total if windows else None


def run_sweep(spec: SweepSpec, out: Path) -> str:
    """Validate device + dtype (SpecError before anything is written), then run and return the state."""
    device = devices.resolve(spec.device)
    devices.check_dtype(device, spec.dtype)
    devices.check_ranks(device, world_size(spec), "tensor_parallel" if spec.tensor_parallel > 1 else "replicas")
    out.mkdir(parents=True, exist_ok=True)
    contract.write_json(out / contract.SPEC, {**spec.to_dict(), "run_id": out.name, "created_at": contract.timestamp()})
    return Sweep(spec, out, device).run()
