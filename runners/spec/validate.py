"""A raw spec (CLI flags, spec.json, the New sweep form) → a SweepSpec, or every problem by field."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from runners.engines.presets import PRESETS
from runners.engines.quant_layout import DIMENSION_MULTIPLE, QUANT_DTYPES, QUANT_ENGINES
from runners.spec import parallel, refine
from runners.spec.modes import MODE_SPECS, MODES
from runners.spec.options import SpecError, check_options, copy_given, cut, parse_batch_sizes, record
from runners.spec.registry import ENGINES
from runners.spec.sweep import (DTYPES, ON_OOM, SweepSpec, checkpoint_config, config_count, model_context,
                                spec_fields)
from runners.workload import distributions


def problems(raw: dict[str, Any], model_roots: list[Path] | None = None) -> dict[str, str]:
    """Every problem in a spec dict, keyed by field; empty when the spec is valid."""
    found: dict[str, str] = {}
    try:
        _build(raw, model_roots, found)
    except SpecError as err:
        found.setdefault(err.field, err.message)
    return {name: cut(message) for name, message in found.items()}


def validate(raw: dict[str, Any], model_roots: list[Path] | None = None) -> SweepSpec:
    """The spec with defaults filled in, or SpecError naming the first bad field."""
    found: dict[str, str] = {}
    spec = _build(raw, model_roots, found)
    if found:
        name, message = next(iter(found.items()))
        raise SpecError(name, message)  # SpecError cuts it as problems() does
    return spec


def _build(raw: Any, model_roots: list[Path] | None, found: dict[str, str]) -> SweepSpec:
    if not isinstance(raw, dict):
        raise SpecError("spec", f"a sweep spec is a JSON object of options, not {type(raw).__name__}")
    infos = spec_fields()
    known = {info.name for info in infos}
    unknown = sorted(map(repr, set(raw) - known))
    if unknown:
        found["spec"] = f"unknown option(s): {', '.join(unknown)}"
    values = {k: v for k, v in raw.items() if k in known and v is not None}
    check_options(infos, values, found)  # types and bounds of every option, before any other check
    model = values.get("model", "")
    context = record(found, "model", lambda: _check_model(model, model_roots))
    spec = SweepSpec(model=model)
    copy_given(spec, values, "dtype", "engine", "mode", "on_oom", "device", "name", "prompt_len", "output_len",
               "repeats", "warmup", "seed", "max_batch_size", "tensor_parallel", "replicas", "telemetry_hz",
               "calibrate", "target_interval", "replays", "max_draws", "point_budget_s", "quantize_lm_head")
    _check_choice(spec.dtype, DTYPES, "dtype", found)
    _check_choice(spec.engine, ENGINES, "engine", found)
    if spec.quantize_lm_head and "model" not in found:
        problem = record(found, "model", lambda: quantised_head_problem(spec.engine, spec.dtype, spec.model))
        if problem:
            found.setdefault("quantize_lm_head", problem)
    if spec.dtype in QUANT_DTYPES and spec.engine in ENGINES and spec.engine not in QUANT_ENGINES:
        found.setdefault("engine", f"dtype {spec.dtype} quantises weights inside the "
                                   f"{' or '.join(QUANT_ENGINES)} engine; {spec.engine} cannot run it")
    if spec.engine == "endpoint" and "mode" not in values:
        spec.mode = "endpoint"  # a server is measured under load: the endpoint mode is the engine's own
    elif (spec.engine == "endpoint") != (spec.mode == "endpoint") and spec.mode in MODES:
        found.setdefault("mode", "the endpoint engine and the endpoint mode go together: a server is measured "
                                 "under an arrival rate or clients")
    _check_choice(spec.mode, MODES, "mode", found)
    _check_choice(spec.on_oom, ON_OOM, "on_oom", found)
    if spec.device != "auto" and spec.device != "cpu" and not (spec.device == "cuda" or spec.device.startswith("cuda:")):
        found.setdefault("device", f"device must be auto, cpu, cuda or cuda:N: {spec.device!r}")
    sizes = record(found, "batch_sizes", lambda: parse_batch_sizes(values.get("batch_sizes", spec.batch_sizes)))
    if sizes:
        spec.batch_sizes = sizes
        if max(sizes) > spec.max_batch_size:
            found.setdefault("batch_sizes", f"batch size {max(sizes)} is over the ceiling "
                                            f"{spec.max_batch_size} (raise max_batch_size to allow it)")
    for name in ("prompt_len", "output_len"):
        record(found, name, lambda n=name: distributions.parse(getattr(spec, n)))
    if spec.mode in MODE_SPECS:
        MODE_SPECS[spec.mode].check(spec, values, found, context)
    parallel.check(spec, found)
    refine.check(spec, values, found)
    return spec


def _check_choice(value: str, choices: tuple[str, ...], name: str, found: dict[str, str]) -> None:
    if value not in choices:
        found.setdefault(name, f"{name} must be one of {', '.join(choices)}: got {value!r}")


def _check_model(model: str, model_roots: list[Path] | None) -> int:
    if not model:
        raise SpecError("model", "choose a preset or a local checkpoint directory")
    if model in PRESETS:
        return model_context(model)
    try:
        path = Path(model).expanduser().resolve()
        outside = model_roots is not None and not any(path.is_relative_to(r.resolve()) for r in model_roots)
        is_dir, has_config = path.is_dir(), (path / "config.json").is_file()
    except (OSError, RuntimeError) as err:  # a name too long for the file system, ~user with no home
        raise SpecError("model", f"unknown model {model!r}: not a preset and not a usable path ({err})") from None
    if outside:
        raise SpecError("model", f"{model!r} is outside the allowed model folders "
                                 f"({', '.join(str(r) for r in model_roots)})")
    if not is_dir:
        raise SpecError("model", f"unknown model {model!r}: not a preset ({', '.join(PRESETS)}) "
                                 f"and no such directory")
    if not has_config:
        raise SpecError("model", f"{model!r} has no config.json")
    return model_context(str(path))


def quantised_head_problem(engine: str, dtype: str, model: str) -> str | None:
    """Why lm_head cannot be quantised with this engine, dtype and model, or None: it is quantised with the layers,
    by a quantising engine, and its vocabulary rows must fit the format's shape rule (a 32 001-token vocabulary does
    not), said before the model loads. SpecError when the model's config cannot be read. Also `runners serve`'s."""
    if engine not in QUANT_ENGINES or dtype not in QUANT_DTYPES:
        return (f"lm_head is quantised with the other weights by the {' or '.join(QUANT_ENGINES)} engine: choose it "
                f"and a quantised dtype ({', '.join(QUANT_DTYPES)}), not {engine} with {dtype}")
    vocab = config_count(checkpoint_config(model), "vocab_size", model)
    multiple = DIMENSION_MULTIPLE[dtype]
    return (f"{dtype} needs lm_head's rows in multiples of {multiple}; {model} has a vocabulary of {vocab:,}"
            if vocab % multiple else None)
