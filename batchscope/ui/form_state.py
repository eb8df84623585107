"""The New sweep widgets' session state: where each starts, and how a stored run's spec fills them, so
"run this again / change one thing" opens the form as that run was launched.

The widgets take their values from session state only (never a `value=` too), so another page can set
them before switching to New sweep without Streamlit warning that a widget has two starting values.
"""
from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from batchscope.analysis.slo import SLO
from batchscope.ui import slo_control
from batchscope.ui.form import CLUSTER, SweepForm, extra_fields
from runners.engines.presets import PRESETS
from runners.spec.options import FieldInfo
from runners.spec.registry import is_load_driven

MODEL_SOURCES = {"preset": "Preset (random weights)", "path": "Local checkpoint"}
BATCH_MODES = {"pow2": "Powers of two", "list": "Explicit list"}
LOADS = {"arrival": "Poisson arrivals", "concurrency": "Closed loop"}
SLO_PREFIX = "slo"  # the New sweep page's SLO control


def widget_state(form: SweepForm) -> dict[str, Any]:
    """Every New sweep widget's value, by key, that shows `form`."""
    preset = form.model in PRESETS
    return {
        "model_source": MODEL_SOURCES["preset" if preset else "path"],
        "preset": form.model if preset else next(iter(PRESETS)), "model_path": "" if preset else form.model,
        "dtype": form.dtype, "engine": form.engine, "mode": form.mode, "device": form.device,
        "batch_mode": BATCH_MODES[form.batch_mode], "batch_lo": form.batch_lo, "batch_hi": form.batch_hi,
        "batch_list": form.batch_list, "prompt_len": form.prompt_len, "output_len": form.output_len,
        "repeats": form.repeats, "warmup": form.warmup, "seed": form.seed, "on_oom": form.on_oom,
        "name": form.name, "max_num_seqs": form.max_num_seqs, "load": LOADS[form.load], "arrival": form.arrival,
        "concurrency": form.concurrency, "num_requests": form.num_requests,
        "max_num_batched_tokens": form.max_num_batched_tokens, "url": form.url, "model_name": form.model_name,
        "api_key_env": form.api_key_env, "server_labels": form.server_labels, "server_command": form.server_command,
        "refine_points": form.refine_points,
        **{info.name: shown(info, form.options.get(info.name, info.default)) for info in extra_fields()},
        **slo_control.state(SLO_PREFIX, form.slo),
    }


def shown(info: FieldInfo, value: Any) -> Any:
    """An option's value as its widget holds it (spec_inputs): a list as its comma text, a number as the
    declared kind, since a number widget takes only values of its own type."""
    if info.kind == "list[int]":
        return ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return {"int": int, "float": float}.get(info.kind, lambda kept: kept)(value)


def start_state(state: MutableMapping) -> None:
    """The form's defaults for every widget not set yet (by the user, or by "run this again")."""
    for key, value in widget_state(SweepForm(slo=slo_control.DEFAULT_SLO)).items():
        state.setdefault(key, value)


def form_from_spec(spec: dict[str, Any], slo: SLO | None) -> SweepForm:
    """The form that launches `spec` (a stored run's spec.json) again, under `slo`."""
    defaults = SweepForm()
    sizes = [int(b) for b in spec.get("batch_sizes") or []]
    pow2 = bool(sizes) and all(b & (b - 1) == 0 for b in sizes) and all(b * 2 == c for b, c in zip(sizes, sizes[1:]))
    continuous = is_load_driven(spec.get("mode"))

    def listed(key: str, fallback: str) -> str:
        value = spec.get(key)
        return ",".join(str(v) for v in value) if isinstance(value, list) and value else fallback

    return SweepForm(
        model=str(spec.get("model") or defaults.model), dtype=spec.get("dtype", defaults.dtype),
        engine=spec.get("engine", defaults.engine), mode=spec.get("mode", defaults.mode),
        device=CLUSTER + spec["cluster_gpu"] if spec.get("cluster_gpu") else spec.get("device", defaults.device),
        batch_mode="pow2" if pow2 else "list",
        batch_lo=sizes[0] if pow2 else defaults.batch_lo, batch_hi=sizes[-1] if pow2 else defaults.batch_hi,
        batch_list=",".join(map(str, sizes)) if sizes and not pow2 else defaults.batch_list,
        prompt_len=spec.get("prompt_len", defaults.prompt_len), output_len=spec.get("output_len", defaults.output_len),
        repeats=int(spec.get("repeats", defaults.repeats)), warmup=int(spec.get("warmup", defaults.warmup)),
        seed=int(spec.get("seed", defaults.seed)), on_oom=spec.get("on_oom", defaults.on_oom), slo=slo,
        max_num_seqs=listed("max_num_seqs", defaults.max_num_seqs),
        load="arrival" if not continuous or spec.get("arrival") else "concurrency",
        arrival=spec.get("arrival") or defaults.arrival, concurrency=listed("concurrency", defaults.concurrency),
        num_requests=int(spec.get("num_requests", defaults.num_requests)),
        max_num_batched_tokens=int(spec.get("max_num_batched_tokens", defaults.max_num_batched_tokens)),
        **{name: str(spec.get(name) or getattr(defaults, name))
           for name in ("url", "model_name", "api_key_env", "server_labels", "server_command")},
        refine_points=int(spec.get("refine_points") or 0), name=str(spec.get("name") or ""),
        options={info.name: spec[info.name] for info in extra_fields() if spec.get(info.name) is not None},
    )
