"""The New sweep form's logic: turn widget values into a spec, name every problem by field, and
estimate memory per batch before anything runs — so the page only lays out widgets and messages."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from batchscope import config
from batchscope.analysis.memory import predict_memory_for_spec
from batchscope.analysis.model_facts import model_facts
from batchscope.analysis.slo import SLO
from runners import distributions
from runners.spec import SpecError, SweepSpec, parse_batch_sizes, problems, validate

H200_CAPACITY_BYTES = 150_109_880_320  # what torch reported on the H200 this project measured on
GiB = 1024**3
ESTIMATE_FIELDS = ("model", "dtype", "engine", "mode", "batch_sizes", "prompt_len", "output_len", "repeats", "warmup",
                   "seed", "max_num_seqs", "arrival", "concurrency", "num_requests")
PREVIEW_SAMPLES = 2000
_CLI = SweepSpec(model="tiny")  # the runner's own defaults, so the form and the CLI start alike


@dataclass
class SweepForm:
    """Every value the New sweep page collects, as plain Python (the widgets' state)."""

    model: str = "tiny"
    dtype: str = _CLI.dtype
    engine: str = _CLI.engine
    mode: str = _CLI.mode
    device: str = _CLI.device
    batch_mode: str = "pow2"  # "pow2" or "list"
    batch_lo: int = 1
    batch_hi: int = 64
    batch_list: str = "1,2,4,8"
    prompt_len: str = _CLI.prompt_len
    output_len: str = _CLI.output_len
    repeats: int = _CLI.repeats
    warmup: int = _CLI.warmup
    seed: int = _CLI.seed
    on_oom: str = _CLI.on_oom
    name: str = ""
    slo: SLO | None = None  # marks the SLO limit on the Run page; a continuous sweep also counts goodput by it
    # continuous mode (runners/continuous_spec.py)
    max_num_seqs: str = "1,2,4,8,16"
    load: str = "arrival"  # "arrival" (Poisson) or "concurrency" (closed loop)
    arrival: str = "poisson:4"
    concurrency: str = "8"
    num_requests: int = 64
    max_num_batched_tokens: int = 2048

    def batch_sizes_text(self) -> str:
        """The batch range as the spec's string: `pow2:LO:HI` or the explicit list."""
        if self.batch_mode == "pow2":
            return f"pow2:{self.batch_lo}:{self.batch_hi}"
        return self.batch_list

    def spec_dict(self) -> dict[str, Any]:
        """The dict JobManager.submit and runners.spec.validate take."""
        return {
            "model": self.model.strip(), "dtype": self.dtype, "engine": self.engine, "mode": self.mode,
            "device": self.device, "batch_sizes": self.batch_sizes_text(), "prompt_len": self.prompt_len,
            "output_len": self.output_len, "repeats": self.repeats, "warmup": self.warmup,
            "seed": self.seed, "on_oom": self.on_oom, "name": self.name.strip(),
            **self._continuous(),
        }

    def _continuous(self) -> dict[str, Any]:
        """The continuous options (only in that mode), with the form's SLO as the goodput SLO."""
        if self.mode != "continuous":
            return {}
        load = {"arrival": self.arrival} if self.load == "arrival" else {"concurrency": self.concurrency}
        slo = {"slo_metric": self.slo.metric, "slo_ms": self.slo.ms} if self.slo is not None else {}
        return {"max_num_seqs": self.max_num_seqs, **load, "num_requests": self.num_requests,
                "max_num_batched_tokens": self.max_num_batched_tokens, **slo}


def check(form: SweepForm) -> dict[str, str]:
    """Every problem keyed by spec field, in the runner's own words; empty when launchable. Local
    checkpoints must lie in the configured model folders, as the job manager demands too. (The SLO is
    an `SLO`, valid by construction: its control refuses a bad limit itself.)"""
    return problems(form.spec_dict(), config.model_roots())


def batch_sizes(form: SweepForm) -> list[int]:
    """The batch sizes the form asks for, or [] while the range is invalid (its message comes from check)."""
    try:
        return parse_batch_sizes(form.batch_sizes_text())
    except SpecError:
        return []


def length_preview(text: str, seed: int, n: int = PREVIEW_SAMPLES) -> list[int]:
    """The lengths the runner would draw for `text` (ValueError with the syntax when malformed)."""
    return distributions.sample_lengths(text, n, seed)


def length_summary(lengths: list[int]) -> str:
    """One line under a histogram: the numbers a user checks against the model's context."""
    series = pd.Series(lengths)
    return (f"median {series.median():,.0f} · P95 {series.quantile(0.95):,.0f} · "
            f"max {series.max():,} tokens ({len(lengths):,} samples)")


@dataclass(frozen=True)
class Capacity:
    """Device memory for the estimate, and where the number came from (shown next to it)."""

    bytes: int
    source: str


def default_capacity(runs: pd.DataFrame, device: str) -> Capacity:
    """What to assume before the user types a number: this machine's RAM for CPU sweeps; else the GPU
    memory the newest stored GPU run recorded; else an H200's 139.8 GiB, said plainly to be a default."""
    if device == "cpu":
        return Capacity(_total_ram(), "this machine's RAM (from the operating system)")
    known = runs.dropna(subset=["gpu_memory_bytes"]) if "gpu_memory_bytes" in runs else runs.iloc[0:0]
    if not known.empty:
        newest = known.iloc[0]
        return Capacity(int(newest["gpu_memory_bytes"]),
                        f"recorded by run {newest['run_id']} on {newest.get('gpu') or 'a GPU'}")
    return Capacity(H200_CAPACITY_BYTES, "an NVIDIA H200 (139.8 GiB usable); no GPU run is stored yet, "
                                         "so enter your GPU's memory")


def _total_ram() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass(frozen=True)
class MemoryEstimate:
    """Weights + KV per batch before the sweep runs; `error` says why there is no table yet."""

    table: pd.DataFrame
    warnings: list[str]
    error: str | None = None


def memory_estimate(form: SweepForm, capacity_bytes: int) -> MemoryEstimate:
    """Predicted memory per batch (per max_num_seqs in continuous mode) with the exact lengths the runner
    will draw, and a warning for every one that will not fit or is tight, so a sweep that will OOM is
    flagged before it is launched."""
    raw = {k: v for k, v in form.spec_dict().items() if k in ESTIMATE_FIELDS}
    try:
        spec = validate(raw, config.model_roots())
        facts = model_facts(spec.model, spec.dtype)
    except SpecError as error:
        return MemoryEstimate(pd.DataFrame(), [], f"No estimate until the {error.field} field is fixed.")
    except (OSError, KeyError, ValueError) as error:
        return MemoryEstimate(pd.DataFrame(), [], f"No estimate: the model's config cannot be read ({error}).")
    predicted = predict_memory_for_spec(facts, spec, capacity_bytes)
    shape = ({"max_num_seqs": predicted["batch_size"], "KV tokens per slot": predicted["tokens_per_row"]}
             if spec.mode == "continuous" else
             {"batch": predicted["batch_size"], "longest prompt": predicted["max_prompt_len"],
              "longest output": predicted["max_output_len"]})
    table = pd.DataFrame({
        **shape,
        "weights GiB": predicted["weight_bytes"] / GiB,
        "KV cache GiB": predicted["kv_bytes"] / GiB,
        "total GiB": predicted["total_bytes"] / GiB,
        "fits": predicted["fits"],
    })
    warnings = [m for m in predicted["message"] if not m.startswith("Fits")]
    return MemoryEstimate(table, warnings)
