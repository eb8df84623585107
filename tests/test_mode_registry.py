"""The modes and engines are declared once (runners.spec.registry) and asked about through its predicates."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from runners.spec import ENGINES, MODES, SweepSpec
from runners.spec.registry import (DEFAULT_MODE, ENGINE_KINDS, MODE_KINDS, decode_reads_whole_cache,
                                   engine_is_remote, engine_release, engine_shows_gpu_knee,
                                   is_load_driven, measures_a_server, modes_that, schedules_slots, server_mode,
                                   static_rows_padded, sweeps_batch_size)
from runners.spec.sweep import LOADED, SERVED, STATIC

ROOT = Path(__file__).resolve().parent.parent
NAME_COMPARED = re.compile(r'(==|!=) "(endpoint|continuous|static)"|in \("(continuous|endpoint|static)"')
# the registry itself, and the spec's own validation (it says which engine a mode needs, in its messages' words)
ALLOWED = {"runners/spec/registry.py", "runners/spec/validate.py", "runners/spec/continuous.py",
           "runners/spec/endpoint.py", "runners/spec/parallel.py"}


def _comparisons() -> list[str]:
    found = []
    for top in ("runners", "batchscope", "app_pages"):
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative in ALLOWED:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if NAME_COMPARED.search(line):
                    found.append(f"{relative}:{number}: {line.strip()}")
    return found


def test_no_mode_name_is_compared_as_a_string_outside_the_registry_and_the_spec_validation() -> None:
    assert _comparisons() == []


def test_the_grep_would_catch_a_mode_compared_as_a_string() -> None:
    assert NAME_COMPARED.search('if spec.get("mode") == "continuous":')
    assert NAME_COMPARED.search('if mode in ("continuous", "endpoint"):')
    assert NAME_COMPARED.search('if mode != "static":')


def test_the_spec_offers_exactly_the_registered_modes_and_engines() -> None:
    assert MODES == tuple(MODE_KINDS) == ("static", "continuous", "endpoint")
    assert ENGINES == tuple(ENGINE_KINDS) == ("hf-generate", "fast", "endpoint")
    assert SweepSpec(model="m").mode == DEFAULT_MODE == "static"


def test_only_the_static_mode_sweeps_batch_sizes_the_user_chose() -> None:
    assert [m for m in MODES if sweeps_batch_size(m)] == ["static"]


def test_continuous_and_endpoint_modes_are_driven_by_a_load() -> None:
    assert [m for m in MODES if is_load_driven(m)] == ["continuous", "endpoint"]


def test_only_the_endpoint_mode_measures_a_server() -> None:
    assert [m for m in MODES if measures_a_server(m)] == ["endpoint"]
    assert server_mode() == "endpoint"


def test_only_the_continuous_mode_schedules_its_own_slots() -> None:
    assert [m for m in MODES if schedules_slots(m)] == ["continuous"]


def test_a_stored_spec_without_a_mode_ran_the_static_mode() -> None:
    assert sweeps_batch_size(None) and not is_load_driven(None) and not measures_a_server(None)


@pytest.mark.parametrize("predicate", [sweeps_batch_size, is_load_driven, measures_a_server, schedules_slots])
def test_a_mode_this_version_does_not_know_has_no_capability(predicate) -> None:
    assert predicate("speculative") is False


def test_the_modes_an_option_applies_to_come_from_the_registry() -> None:
    assert (STATIC, LOADED, SERVED) == (("static",), ("continuous", "endpoint"), ("endpoint",))
    assert modes_that(lambda mode: not measures_a_server(mode)) == ("static", "continuous")


def test_only_the_endpoint_engine_is_remote_and_only_the_fast_engine_shows_the_gpu_knee() -> None:
    assert [e for e in ENGINES if engine_is_remote(e)] == ["endpoint"]
    assert [e for e in ENGINES if engine_shows_gpu_knee(e)] == ["fast"]
    assert not engine_is_remote(None) and not engine_shows_gpu_knee("vllm")



def test_only_the_fast_engines_static_batches_up_to_version_2_read_the_whole_cache() -> None:
    fast2 = "fast 2 (packed prefill, compile True, graphs True; torch 2.11.0+cu130, transformers 5.17.0); replicas 2"
    assert decode_reads_whole_cache("fast", "static", fast2)
    assert decode_reads_whole_cache("fast", None, "fast 1 (compile True)")  # a spec from before modes ran static
    assert not decode_reads_whole_cache("fast", "static", "fast 3 (packed prefill)")
    assert not decode_reads_whole_cache("fast", "static", "fast 21 (packed prefill)")
    assert not decode_reads_whole_cache("fast", "continuous", fast2)
    assert not decode_reads_whole_cache("hf-generate", "static", "hf-generate (transformers 5.17.0)")
    assert not decode_reads_whole_cache("fast", "static", None)  # not recorded: not told


def test_an_engine_release_is_the_number_after_its_name_in_the_recorded_version() -> None:
    assert engine_release("fast", "fast 2 (packed prefill, weights fp8, compile True)") == 2
    assert engine_release("fast", "fast 13; tensor parallel 2") == 13
    assert engine_release("hf-generate", "hf-generate (transformers 5.17.0, torch 2.11.0+cu130)") is None
    assert engine_release("fast", "faster 2 (x)") is None
    assert engine_release(None, "fast 2") is None and engine_release("fast", None) is None


def test_hf_generate_pads_its_static_rows_to_the_longest_prompt_and_fast_does_not() -> None:
    assert static_rows_padded("hf-generate") and not static_rows_padded("fast")
    assert static_rows_padded("an-engine-from-a-later-version")  # unknown: padded, as model.generate() is
