"""The New sweep form's logic: turn widget values into a spec, name every problem by field, and
estimate memory per batch before anything runs — so the page only lays out widgets and messages."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from batchscope import config
from batchscope.analysis.memory import predict_memory_for_spec
from batchscope.analysis.model_facts import model_facts
from batchscope.analysis.slo import SLO
from batchscope.backends.local import device_key
from batchscope.backends.ray_cluster import GpuType, placement_problem, ranks
from batchscope.ui.slo_control import slo_param
from batchscope.units import GiB
from runners.spec import SpecError, SweepSpec, model_context, parse_batch_sizes, problems, validate
from runners.spec.options import FieldInfo
from runners.spec.registry import is_load_driven, measures_a_server, schedules_slots, sweeps_batch_size
from runners.spec.sweep import check_draws, spec_fields
from runners.workload import distributions

LOCAL_DEVICES = ("auto", "cuda", "cpu")
CLUSTER = "ray:"  # a Device value `ray:H200` sends the sweep to the Ray cluster's H200 GPUs
H200_CAPACITY_BYTES = 150_109_880_320  # what torch reported on the H200 this project measured on
PREVIEW_SAMPLES = 2000
_CLI = SweepSpec(model="tiny")  # the runner's own defaults, so the form and the CLI start alike
FROM_WIDGETS = ("batch_sizes", "slo_metric", "slo_ms", "refine_slo")  # set by the batch range and the SLO control


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
    refine_points: int = _CLI.refine_points  # points the runner may add toward the SLO limit (the form's SLO) and knee
    # continuous mode (runners/spec/continuous.py)
    max_num_seqs: str = "1,2,4,8,16"
    load: str = "arrival"  # "arrival" (Poisson) or "concurrency" (closed loop)
    arrival: str = "poisson:4"
    concurrency: str = "8"
    num_requests: int = 64
    max_num_batched_tokens: int = 2048
    # engine endpoint (runners/spec/endpoint.py): the load above, sent to a running server
    url: str = _CLI.url
    model_name: str = ""
    api_key_env: str = ""
    server_labels: str = ""
    server_command: str = ""
    options: dict[str, Any] = field(default_factory=dict)  # every other spec option (extra_fields), by name

    def batch_sizes_text(self) -> str:
        """The batch range as the spec's string: `pow2:LO:HI` or the explicit list."""
        if self.batch_mode == "pow2":
            return f"pow2:{self.batch_lo}:{self.batch_hi}"
        return self.batch_list

    def cluster_gpu(self) -> str | None:
        """The Ray cluster's GPU type the Device field picked; None for a device of this machine."""
        return self.device.removeprefix(CLUSTER) if self.device.startswith(CLUSTER) else None

    def spec_dict(self) -> dict[str, Any]:
        """The dict JobManager.submit takes (runners.spec.validate takes it without `cluster_gpu`): a sweep
        sent to a cluster GPU type runs on CUDA there."""
        gpu = self.cluster_gpu()
        return {
            "model": self.model.strip(), "dtype": self.dtype, "engine": self.engine, "mode": self.mode,
            "device": "cuda" if gpu else self.device, **({"cluster_gpu": gpu} if gpu else {}),
            "batch_sizes": self.batch_sizes_text(), "prompt_len": self.prompt_len,
            "output_len": self.output_len, "repeats": self.repeats, "warmup": self.warmup,
            "seed": self.seed, "on_oom": self.on_oom, "name": self.name.strip(), "refine_points": self.refine_points,
            **({"refine_slo": slo_param(self.slo)} if self.refine_points and self.slo is not None else {}),
            **self._continuous(), **self._options(),
        }

    def _options(self) -> dict[str, Any]:
        """The options without a SweepForm attribute of their own that the form's mode reads."""
        extras = {info.name: info for info in extra_fields()}
        return {name: value for name, value in self.options.items()
                if name in extras and extras[name].applies_to(self.mode)}

    def _continuous(self) -> dict[str, Any]:
        """The continuous options (in that mode, and sent to a server in the endpoint mode), with the form's
        SLO as the goodput SLO."""
        if not is_load_driven(self.mode):
            return {}
        load = {"arrival": self.arrival} if self.load == "arrival" else {"concurrency": self.concurrency}
        slo = {"slo_metric": self.slo.metric, "slo_ms": self.slo.ms} if self.slo is not None else {}
        if measures_a_server(self.mode):
            knobs = {k: v for k, v in (("max_num_seqs", self.max_num_seqs),
                                       ("max_num_batched_tokens", self.max_num_batched_tokens))
                     if "{" + k + "}" in self.server_command}  # the server's own, unless its command takes them
            return {**knobs, **load, "num_requests": self.num_requests, "url": self.url.strip(),
                    "model_name": self.model_name.strip(), "api_key_env": self.api_key_env.strip(),
                    "server_labels": self.server_labels.strip(), "server_command": self.server_command.strip(), **slo}
        return {"max_num_seqs": self.max_num_seqs, **load, "num_requests": self.num_requests,
                "max_num_batched_tokens": self.max_num_batched_tokens, **slo}


def extra_fields() -> list[FieldInfo]:
    """The spec options the form keeps in `SweepForm.options`: all but its own attributes and those the batch
    range and the SLO control set. An option declared on SweepSpec lands here, so the form shows it, sends
    it and fills it again from a stored run without an edit."""
    own = {f.name for f in fields(SweepForm)} | set(FROM_WIDGETS)
    return [info for info in spec_fields() if info.name not in own]


def device_choices(cluster: list[GpuType] | None, current: str) -> dict[str, str]:
    """The Device field's choices, value → label: this machine's devices, then each GPU type of the Ray
    cluster with how many are free. A cluster type picked before and gone now stays listed, so the field
    keeps it and `check` says why it cannot launch."""
    choices = {device: device for device in LOCAL_DEVICES}
    for gpu in cluster or []:
        choices[CLUSTER + gpu.name] = (f"{gpu.name} on the Ray cluster: {gpu.free} of {gpu.total} free"
                                       + (f", {gpu.free_on_one_node} on one node" if gpu.free_on_one_node < gpu.free
                                          else ""))
    if current.startswith(CLUSTER) and current not in choices:
        choices[current] = f"{current.removeprefix(CLUSTER)} on the Ray cluster (not there now)"
    return choices


def check(form: SweepForm, cluster: list[GpuType] | None = None) -> dict[str, str]:
    """Every problem keyed by spec field, in the runner's own words (the From/To range in the form's);
    empty when launchable. Local checkpoints must lie in the configured model folders, as the job
    manager demands too. A sweep for the Ray cluster needs a node with its GPU type (`cluster`: the
    cluster's types now). (The SLO is an `SLO`, valid by construction: its control refuses a bad limit.)"""
    spec = form.spec_dict()
    gpu = spec.pop("cluster_gpu", None)
    found = problems(spec, config.model_roots())
    placement = placement_problem(gpu, ranks(spec), cluster or []) if gpu else None  # one GPU per rank
    if placement:
        found.setdefault("device", placement)
    range_problem = _range_problem(form)
    if range_problem:
        found["batch_sizes"] = range_problem
    return found


def _range_problem(form: SweepForm) -> str | None:
    """A From/To range in the words of its two fields, not the spec's `pow2:LO:HI`."""
    if not sweeps_batch_size(form.mode) or form.batch_mode != "pow2":
        return None
    if form.batch_lo < 1:
        return f"From must be at least 1 (it is {form.batch_lo})"
    if form.batch_lo > form.batch_hi:
        return f"From ({form.batch_lo}) must not be larger than To ({form.batch_hi})"
    if not batch_sizes(form):
        return f"no power of two lies between {form.batch_lo} and {form.batch_hi}"
    return None


def batch_sizes(form: SweepForm) -> list[int]:
    """The batch sizes the form asks for, or [] while the range is invalid (its message comes from check)."""
    try:
        return parse_batch_sizes(form.batch_sizes_text())
    except SpecError:
        return []


def batch_note(form: SweepForm) -> str | None:
    """What the batch inputs will run, said under them: the sizes, and why they differ from what was
    typed (a From/To that is not a power of two snaps inwards to the powers of two between them)."""
    sizes = batch_sizes(form)
    if not sizes or _range_problem(form):
        return None
    shown = ", ".join(map(str, sizes))
    note = f"Runs batch sizes {shown} ({len(sizes)} point{'s' if len(sizes) > 1 else ''})."
    off = [f"{name} {value}" for name, value in (("From", form.batch_lo), ("To", form.batch_hi))
           if value & (value - 1)]
    if form.batch_mode == "pow2" and off:
        note += (f" {' and '.join(off)} {'is' if len(off) == 1 else 'are'} not a power of two, so the range "
                 f"snaps to the powers of two between them.")
    return note


def length_preview(text: str, seed: int, n: int = PREVIEW_SAMPLES) -> list[int]:
    """The lengths the runner would draw for `text` (ValueError with the syntax when malformed)."""
    return distributions.sample_lengths(text, n, seed)


def sweep_lengths(form: SweepForm) -> tuple[list[int], list[int]] | None:
    """(prompt, output) lengths of every request the static sweep will draw, warm-up included, in the
    runner's own draw (SweepSpec.request_lengths): the preview then shows what the context check reads.
    None in continuous and endpoint mode, while the batch sizes or lengths are invalid, or past the requests
    a sweep may draw (runners.spec.sweep.check_draws)."""
    sizes = batch_sizes(form)
    if not sweeps_batch_size(form.mode) or not sizes:
        return None
    spec = SweepSpec(model=form.model, batch_sizes=sizes, prompt_len=form.prompt_len, output_len=form.output_len,
                     repeats=form.repeats, warmup=form.warmup, seed=form.seed)
    prompts: list[int] = []
    outputs: list[int] = []
    try:
        check_draws(spec, sum(sizes), "batch_sizes")  # past the limit its message says why; nothing is drawn
        for batch in sizes:
            for repeat in spec.repeat_indices():
                drawn = spec.request_lengths(batch, repeat)
                prompts += drawn[0]
                outputs += drawn[1]
    except ValueError:
        return None
    return prompts, outputs


def length_summary(lengths: list[int], drawn_by_sweep: bool = False) -> str:
    """One line under a histogram: the numbers a user checks against the model's context."""
    series = pd.Series(lengths)
    what = f"{len(lengths):,} requests the sweep draws" if drawn_by_sweep else f"{len(lengths):,} samples"
    return (f"median {series.median():,.0f} · P95 {series.quantile(0.95):,.0f} · "
            f"max {series.max():,} tokens ({what})")


def longest_request(prompts: list[int], outputs: list[int], context: int | None) -> str:
    """The longest prompt + output the sweep draws, beside the model's context when it is known: the two
    numbers the context check compares."""
    longest = max(p + o for p, o in zip(prompts, outputs))
    beside = f"; the model's context is {context:,} tokens" if context else ""
    return f"Longest request: prompt + output = {longest:,} tokens{beside}."


def context_of(form: SweepForm, found: dict[str, str]) -> int | None:
    """The model's context length once `check` (whose problems are `found`) accepts the model, so no file
    outside the allowed model folders is read."""
    if "model" in found:
        return None
    try:
        return model_context(str(Path(form.model.strip()).expanduser()))
    except (OSError, KeyError, ValueError):
        return None


@dataclass(frozen=True)
class Capacity:
    """Device memory for the estimate, and where the number came from (shown next to it)."""

    bytes: int
    source: str


def default_capacity(runs: pd.DataFrame, device: str) -> Capacity:
    """What to assume before the user types a number: this machine's RAM for CPU sweeps (and for auto
    where no GPU is visible); else the GPU memory the newest stored GPU run recorded; else an H200's
    139.8 GiB, said plainly to be a default."""
    if device == "cpu":
        return Capacity(_total_ram(), "this machine's RAM (from the operating system)")
    if device == "auto" and device_key(device) == "cpu":
        return Capacity(_total_ram(), "this machine's RAM: no GPU is visible here, so auto runs on the CPU")
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
    shaping = {info.name for info in spec_fields() if info.memory}
    raw = {k: v for k, v in form.spec_dict().items() if k in shaping}
    try:
        spec = validate(raw, config.model_roots())
        facts = model_facts(spec.model, spec.dtype, spec.quantize_lm_head)
    except SpecError as error:
        return MemoryEstimate(pd.DataFrame(), [], f"No estimate until the {error.field} field is fixed.")
    except (OSError, KeyError, ValueError) as error:
        return MemoryEstimate(pd.DataFrame(), [], f"No estimate: the model's config cannot be read ({error}).")
    predicted = predict_memory_for_spec(facts, spec, capacity_bytes)
    shape = ({"max_num_seqs": predicted["batch_size"], "KV tokens per slot": predicted["tokens_per_row"]}
             if schedules_slots(spec.mode) else
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
