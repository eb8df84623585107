"""A spec option declared once on SweepSpec reaches the CLI, validation and the New sweep form, and "run this
again" keeps every option of a stored spec."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from batchscope.analysis import SLO
from batchscope.ui import form, form_state
from runners import cli
from runners.spec import problems, sweep, validate
from runners.spec.options import option
from tests.test_pages import home, no_traceback, open_page, texts  # noqa: F401 (home is a fixture)


@dataclass
class ProbeSpec(sweep.SweepSpec):
    """SweepSpec with one throwaway option, as a maintainer would add it."""

    probe_depth: int = option(7, label="Probe depth", least=1, most=9, help="how deep the probe goes (default 7)")


@pytest.fixture
def probe_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep, "SweepSpec", ProbeSpec)


def test_an_option_declared_on_the_spec_is_a_cli_flag_with_its_help_and_bounds(probe_field) -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["sweep", "--out", "run", "--probe-depth", "3"])
    assert cli._raw_spec(args) == {"probe_depth": "3"}
    sweep_help = next(a for a in parser._actions if a.dest == "command").choices["sweep"].format_help()
    assert "--probe-depth" in sweep_help and "how deep the probe goes" in " ".join(sweep_help.split())
    assert problems({"model": "tiny", "probe_depth": "3"}) == {}
    assert problems({"model": "tiny", "probe_depth": "10"}) == {"probe_depth": "probe_depth must be at "
                                                                                        "most 9, got 10"}


def test_an_option_declared_on_the_spec_is_in_the_form_and_its_rerun(probe_field) -> None:
    assert [info.name for info in form.extra_fields()][-1] == "probe_depth"
    assert form_state.widget_state(form.SweepForm())["probe_depth"] == 7
    filled = form_state.form_from_spec({"model": "tiny", "probe_depth": 4}, None)
    assert filled.spec_dict()["probe_depth"] == 4
    assert form.check(form.SweepForm(model="tiny", options={"probe_depth": 12}))["probe_depth"].endswith("got 12")


def test_the_new_sweep_page_draws_a_declared_option_within_its_bounds(home, probe_field) -> None:
    at = open_page("app_pages/new_sweep.py")
    no_traceback(at)
    probe = at.number_input(key="probe_depth")
    assert (probe.label, probe.value, probe.min, probe.max) == ("Probe depth", 7, 1, 9)
    assert at.number_input(key="repeats").max == 1000  # the spec's limit, not a form's own
    probe.set_value(3).run()
    no_traceback(at)
    assert not at.error, texts(at, "error")


RERUNS = {
    "static": ({"engine": "fast", "batch_sizes": [2, 3, 8], "max_batch_size": 512, "replicas": 2, "on_oom": "continue",
                "refine_slo": "ttft:95:500"}, SLO("ttft", 95, 500.0)),
    "continuous": ({"engine": "fast", "mode": "continuous", "max_num_seqs": "2,4", "arrival": "poisson:4",
                    "num_requests": 16, "max_num_batched_tokens": 512, "kv_cache_tokens": 4096,
                    "gpu_memory_utilization": 0.5, "slo_metric": "e2e", "slo_ms": 900.0, "refine_slo": "e2e:95:900",
                    "think_ms": 0.0},
                   SLO("e2e", 95, 900.0)),
    "endpoint": ({"engine": "endpoint", "mode": "endpoint", "concurrency": "1,4", "think_ms": 20.0, "num_requests": 16,
                  "url": "http://gpu-host:9000/v1", "model_name": "m", "api_key_env": "BATCHSCOPE_KEY_M",
                  "server_labels": "vllm 0.11", "server_command": "vllm serve m --max-num-seqs {max_num_seqs}",
                  "max_num_seqs": "8", "api": "chat", "prompt_format": "text", "request_timeout_s": 30.0,
                  "ready_timeout_s": 40.0, "slo_metric": "itl", "slo_ms": 250.0, "refine_slo": "itl:95:250"},
                 SLO("itl", 95, 250.0)),
}


@pytest.mark.parametrize("mode", list(RERUNS))
def test_running_a_stored_spec_again_keeps_every_option(mode: str) -> None:
    changes, slo = RERUNS[mode]
    raw = {"model": "tiny", "dtype": "float32", "device": "cpu", "prompt_len": "fixed:16", "output_len": "fixed:4",
           "repeats": 2, "warmup": 0, "seed": 5, "name": "again", "telemetry_hz": 50.0, "calibrate": False,
           "target_interval": 0.1, "replays": 2, "max_draws": 9, "point_budget_s": 60.0, "refine_points": 2,
           "refine_tolerance": 0.1, **changes}
    stored = validate(raw).to_dict()
    again = form_state.form_from_spec({**stored, "run_id": "r", "created_at": "t"}, slo)
    assert validate(again.spec_dict()).to_dict() == stored


def test_the_think_time_is_asked_for_with_a_closed_loop_and_refused_with_an_arrival_rate(home) -> None:
    at = open_page("app_pages/new_sweep.py")
    at.selectbox(key="engine").set_value("fast")
    at.selectbox(key="mode").set_value("continuous").run()
    think = at.number_input(key="think_ms")
    assert (think.label, think.value, think.min) == ("Client think time (ms)", 0.0, 0.0)
    think.set_value(5.0).run()
    no_traceback(at)
    assert any("think time" in e and "concurrency" in e for e in texts(at, "error")), texts(at, "error")
