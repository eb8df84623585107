"""The sweep spec: every option of a sweep, validated before anything runs.

Torch-free on purpose, so the New sweep page flags the same errors next to each field that the runner
would reject with exit code 2. Device checks (can this GPU run bfloat16?) live in `runners.devices`.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from runners import distributions
from runners.parallel_spec import check_parallel
from runners.presets import PRESETS
from runners.quant_layout import QUANT_DTYPES, QUANT_ENGINES

DTYPES = ("float32", "bfloat16", "float16", *QUANT_DTYPES)
ENGINES = ("hf-generate", "fast")
MODES = ("static", "continuous")
ON_OOM = ("stop", "continue")
DEFAULT_MAX_BATCH_SIZE = 4096
MIN_TELEMETRY_HZ = 20.0
SLO_METRICS = ("ttft", "itl", "e2e")


class SpecError(ValueError):
    """A rejected option: `field` names the option so a form can show the message beside it."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


@dataclass
class SweepSpec:
    model: str
    dtype: str = "bfloat16"
    engine: str = "hf-generate"
    mode: str = "static"
    batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    prompt_len: str = "fixed:128"
    output_len: str = "fixed:32"
    repeats: int = 3
    warmup: int = 1
    seed: int = 0
    device: str = "auto"
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    on_oom: str = "stop"
    telemetry_hz: float = 20.0
    calibrate: bool = True
    name: str = ""
    # several processes (runners.parallel_spec says what each allows)
    tensor_parallel: int = 1
    replicas: int = 1
    # continuous mode only (runners.continuous_spec says what each means)
    max_num_seqs: list[int] = field(default_factory=lambda: [8])
    arrival: str = ""
    concurrency: list[int] = field(default_factory=list)
    num_requests: int = 64
    max_num_batched_tokens: int = 2048
    kv_cache_tokens: int = 0
    slo_metric: str = "ttft"
    slo_ms: float = 1000.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def request_lengths(self, batch_size: int, repeat: int) -> tuple[list[int], list[int]]:
        """The prompt and output lengths of one batch; the same for the same seed, batch and repeat."""
        prompt = distributions.parse(self.prompt_len)
        output = distributions.parse(self.output_len)
        key = f"{self.seed}:{batch_size}:{repeat}"
        return (prompt.sample(batch_size, random.Random(f"prompt:{key}")),
                output.sample(batch_size, random.Random(f"output:{key}")))

    def repeat_indices(self) -> range:
        """Warm-up repeats are numbered below zero so they never share lengths with measured ones."""
        return range(-self.warmup, self.repeats)


def parse_batch_sizes(value: Any, name: str = "batch_sizes") -> list[int]:
    """Accept a list, `1,2,4`, or `pow2:LO:HI` (powers of two from LO to HI inclusive)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("pow2:"):
            lo, hi = (_whole(x, name) for x in text[5:].split(":", 1)) if ":" in text[5:] else (None, None)
            if lo is None or lo < 1 or hi < lo:
                raise SpecError(name, f"pow2 range must be pow2:LO:HI with 1 ≤ LO ≤ HI: {text!r}")
            sizes, b = [], 1
            while b <= hi:
                if b >= lo:
                    sizes.append(b)
                b *= 2
            if not sizes:
                raise SpecError(name, f"no power of two lies in {text!r}")
            return sizes
        items = [x for x in text.replace(" ", ",").split(",") if x]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise SpecError(name, "give a list like 1,2,4 or pow2:1:256")
    if not items:
        raise SpecError(name, "no batch sizes given")
    sizes = [_whole(x, name) for x in items]
    if any(b < 1 for b in sizes):
        raise SpecError(name, f"batch sizes must be ≥ 1: {sizes}")
    return sorted(set(sizes))


def _whole(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise SpecError(name, f"not a whole number: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return int(str(value).strip())
    except ValueError:
        raise SpecError(name, f"not a whole number: {value!r}") from None


def set_whole_numbers(spec: SweepSpec, values: dict[str, Any], bounds: tuple[tuple[str, int], ...],
                      found: dict[str, str]) -> None:
    """Copy whole-number options into the spec, each at least its lower bound; problems go to `found`."""
    for name, lo in bounds:
        if name not in values:
            continue
        try:
            number = _whole(values[name], name)
        except SpecError as err:
            found.setdefault(err.field, err.message)
            continue
        if number < lo:
            found.setdefault(name, f"{name} must be ≥ {lo}, got {number}")
        else:
            setattr(spec, name, number)


def model_context(model: str) -> int:
    """Maximum sequence length of a preset or a local checkpoint (read from config.json)."""
    if model in PRESETS:
        return int(PRESETS[model]["max_position_embeddings"])
    config = json.loads((Path(model) / "config.json").read_text())
    return int(config.get("max_position_embeddings") or config.get("max_seq_len") or 2048)


def problems(raw: dict[str, Any], model_roots: list[Path] | None = None) -> dict[str, str]:
    """Every problem in a spec dict, keyed by field; empty when the spec is valid."""
    found: dict[str, str] = {}
    try:
        _build(raw, model_roots, found)
    except SpecError as err:
        found.setdefault(err.field, err.message)
    return found


def validate(raw: dict[str, Any], model_roots: list[Path] | None = None) -> SweepSpec:
    """The spec with defaults filled in, or SpecError naming the first bad field."""
    found: dict[str, str] = {}
    spec = _build(raw, model_roots, found)
    if found:
        name, message = next(iter(found.items()))
        raise SpecError(name, message)
    return spec


def _build(raw: dict[str, Any], model_roots: list[Path] | None, found: dict[str, str]) -> SweepSpec:
    known = {f.name for f in fields(SweepSpec)}
    unknown = sorted(set(raw) - known)
    if unknown:
        found["spec"] = f"unknown option(s): {', '.join(unknown)}"
    values = {k: v for k, v in raw.items() if k in known and v is not None}

    def check(name: str, fn) -> Any:
        try:
            return fn()
        except SpecError as err:
            found.setdefault(err.field, err.message)
        except ValueError as err:
            found.setdefault(name, str(err))
        return None

    model = str(values.get("model") or "").strip()
    context = check("model", lambda: _check_model(model, model_roots))
    spec = SweepSpec(model=model)
    for name in ("dtype", "engine", "mode", "on_oom", "device", "name", "prompt_len", "output_len"):
        if name in values:
            setattr(spec, name, str(values[name]).strip())
    _check_choice(spec.dtype, DTYPES, "dtype", found)
    _check_choice(spec.engine, ENGINES, "engine", found)
    if spec.dtype in QUANT_DTYPES and spec.engine in ENGINES and spec.engine not in QUANT_ENGINES:
        found.setdefault("engine", f"dtype {spec.dtype} quantises weights inside the "
                                   f"{' or '.join(QUANT_ENGINES)} engine; {spec.engine} cannot run it")
    _check_choice(spec.mode, MODES, "mode", found)
    _check_choice(spec.on_oom, ON_OOM, "on_oom", found)
    if spec.device != "auto" and spec.device != "cpu" and not (spec.device == "cuda" or spec.device.startswith("cuda:")):
        found.setdefault("device", f"device must be auto, cpu, cuda or cuda:N: {spec.device!r}")
    set_whole_numbers(spec, values, (("repeats", 1), ("warmup", 0), ("seed", 0), ("max_batch_size", 1),
                                     ("tensor_parallel", 1), ("replicas", 1)), found)
    if "telemetry_hz" in values:
        hz = check("telemetry_hz", lambda: float(values["telemetry_hz"]))
        if hz is not None and (math.isnan(hz) or not MIN_TELEMETRY_HZ <= hz <= 1000):
            found.setdefault("telemetry_hz", f"telemetry_hz must be between {MIN_TELEMETRY_HZ:g} and 1000 "
                                             f"(DESIGN: utilisation is sampled at ≥ 20 Hz), got {hz}")
        elif hz is not None:
            spec.telemetry_hz = hz
    if "calibrate" in values:
        spec.calibrate = bool(values["calibrate"])
    sizes = check("batch_sizes", lambda: parse_batch_sizes(values.get("batch_sizes", spec.batch_sizes)))
    if sizes:
        spec.batch_sizes = sizes
        if max(sizes) > spec.max_batch_size:
            found.setdefault("batch_sizes", f"batch size {max(sizes)} is over the ceiling "
                                            f"{spec.max_batch_size} (raise max_batch_size to allow it)")
    for name in ("prompt_len", "output_len"):
        check(name, lambda n=name: distributions.parse(getattr(spec, n)))
    if spec.mode == "continuous":
        from runners.continuous_spec import check_continuous

        check_continuous(spec, values, found, context)
    elif context and not {"prompt_len", "output_len", "batch_sizes"} & set(found):
        check("prompt_len", lambda: _check_context(spec, context))
    check_parallel(spec, found)
    return spec


def _check_choice(value: str, choices: tuple[str, ...], name: str, found: dict[str, str]) -> None:
    if value not in choices:
        found.setdefault(name, f"{name} must be one of {', '.join(choices)}: got {value!r}")


def _check_model(model: str, model_roots: list[Path] | None) -> int:
    if not model:
        raise SpecError("model", "choose a preset or a local checkpoint directory")
    if model in PRESETS:
        return model_context(model)
    path = Path(model).expanduser().resolve()
    if model_roots is not None and not any(path.is_relative_to(r.resolve()) for r in model_roots):
        raise SpecError("model", f"{model!r} is outside the allowed model folders "
                                 f"({', '.join(str(r) for r in model_roots)})")
    if not path.is_dir():
        raise SpecError("model", f"unknown model {model!r}: not a preset ({', '.join(PRESETS)}) "
                                 f"and no such directory")
    if not (path / "config.json").is_file():
        raise SpecError("model", f"{model!r} has no config.json")
    return model_context(str(path))


def _check_context(spec: SweepSpec, context: int) -> None:
    """Prompt + output must fit the model's context for every request the sweep will draw."""
    longest = 0
    for batch in spec.batch_sizes:
        for repeat in spec.repeat_indices():
            prompts, outputs = spec.request_lengths(batch, repeat)
            longest = max(longest, max(p + o for p, o in zip(prompts, outputs)))
    if longest > context:
        raise SpecError("prompt_len", f"prompt + output reaches {longest} tokens, over the model's "
                                      f"context of {context}")
