"""Property tests of what every sweep goes through first: whatever text or JSON a user, a spec file or the
New sweep form hands over, the validator answers with a valid spec or one SpecError line, and the
length-distribution parser with a distribution or one ValueError line — quickly, and nothing else."""
from __future__ import annotations

import json
import random
import tempfile
import time
from dataclasses import fields
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runners.spec import SpecError, SweepSpec, problems, validate
from runners.workload import distributions

# The bar (issue 16): an answer in under 2 s, whatever the input. Examples stay few so CI stays fast.
QUICK = settings(deadline=timedelta(seconds=2), max_examples=150,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
NUMBER = st.integers(min_value=-(10**25), max_value=10**25) | st.floats(allow_nan=True, allow_infinity=True)
WORD = st.sampled_from(["fixed", "uniform", "normal", "lognormal", "file", "poisson", "pow2", "", " ", "FIXED"])
PIECE = (st.integers(min_value=-(10**12), max_value=10**12).map(str) | NUMBER.map(str) | WORD
         | st.text(max_size=8))
SYNTAX_LIKE = st.builds(lambda word, parts: ":".join([word, *parts]), WORD, st.lists(PIECE, max_size=4))
LIST_LIKE = st.lists(st.integers(min_value=-2, max_value=2**20).map(str), min_size=1, max_size=6).map(",".join)
# Valid choices too, so the checks behind the first ones (context, draws, mode options) run as well.
GOOD = {
    "model": st.sampled_from(["tiny", "llama-3.2-1b", "", "no-such-model", "/", "~no-such-user/x", "a" * 300]),
    "dtype": st.sampled_from(["float32", "bfloat16", "int8", "fp8"]),
    "engine": st.sampled_from(["hf-generate", "fast", "endpoint"]),
    "mode": st.sampled_from(["static", "continuous", "endpoint"]),
    "device": st.sampled_from(["auto", "cpu", "cuda:0"]),
    "batch_sizes": st.sampled_from(["1,2,4", "pow2:1:4096", "pow2:1:65536", [1, 4096], [65536]]),
    "prompt_len": st.sampled_from(["fixed:8", "uniform:1:100", "normal:64:200", "lognormal:64:2", "fixed:2000"]),
    "output_len": st.sampled_from(["fixed:4", "uniform:1:4000", "lognormal:16:1"]),
    "max_num_seqs": st.sampled_from(["8", "pow2:1:256", [1, 2]]),
    "arrival": st.sampled_from(["poisson:4", "poisson:0.01,1", ""]),
    "concurrency": st.sampled_from(["", "4", "1,4,16"]),
    "url": st.sampled_from(["http://127.0.0.1:8000/v1", "http://[::1", "ftp://x", "http://u:p@h/v1"]),
    "server_command": st.sampled_from(["serve --max-num-seqs {max_num_seqs}", "serve '{x}", "{nope}"]),
    "refine_slo": st.sampled_from(["ttft:95:1000", "itl:50:0", "e2e:99:1e999", "x:1:2"]),
}


def field_value(name: str) -> st.SearchStrategy[Any]:
    """Anything for the field: JSON, numbers at and far past every bound, syntax-like text, or a valid value."""
    choices = JSON | NUMBER | SYNTAX_LIKE | LIST_LIKE | st.integers(min_value=0, max_value=2**33)
    return (GOOD[name] | choices) if name in GOOD else choices


SPEC_FIELDS = [f.name for f in fields(SweepSpec)]
SPEC_DICTS = st.fixed_dictionaries({"model": GOOD["model"]}, optional={
    name: field_value(name) for name in SPEC_FIELDS if name != "model"}) | st.dictionaries(
    st.sampled_from(SPEC_FIELDS) | st.text(max_size=8), JSON, max_size=6)


def one_line_spec_error(raw: Any) -> SweepSpec | SpecError:
    """validate(raw), checking that what it raises is a SpecError whose message is one line."""
    try:
        spec = validate(raw)
    except SpecError as err:
        assert str(err) and "\n" not in str(err), repr(str(err))
        assert err.field and "\n" not in err.field
        return err
    assert isinstance(spec, SweepSpec)
    return spec


@QUICK
@given(SPEC_DICTS)
def test_any_spec_dict_gives_a_valid_spec_or_one_spec_error_line(raw: dict[str, Any]) -> None:
    result = one_line_spec_error(raw)
    found = problems(raw)  # what the New sweep form shows beside each field
    assert all(isinstance(m, str) and m and "\n" not in m for m in found.values()), found
    assert bool(found) == isinstance(result, SpecError)
    if isinstance(result, SweepSpec):  # a valid spec round-trips through spec.json unchanged
        assert validate(json.loads(json.dumps(result.to_dict()))) == result


@QUICK
@given(JSON)
def test_any_json_value_as_the_whole_spec_gives_one_spec_error_line_or_a_spec(value: Any) -> None:
    one_line_spec_error(value)
    assert isinstance(problems(value), dict)


@QUICK
@given(SYNTAX_LIKE | st.text(max_size=40))
@example("lognormal:1e300:1e300")  # a draw that overflows a float
@example("normal:1e308:1e308")
@example("file:" + "a" * 300)  # a name too long for the file system
@example("file:/proc/self/mem")  # unreadable
@example("file:\0")
def test_any_text_parses_to_a_distribution_that_samples_or_one_value_error_line(text: str) -> None:
    try:
        parsed = distributions.parse(text)
    except ValueError as err:
        assert str(err) and "\n" not in str(err), repr(str(err))
    else:
        drawn = parsed.sample(50, random.Random(0))
        bound = parsed.upper_bound()
        assert all(isinstance(n, int) and n >= 1 for n in drawn)
        assert bound is None or max(drawn) <= bound
    for name in ("prompt_len", "output_len"):  # and as the sweep's lengths, a spec or one SpecError line
        one_line_spec_error({"model": "tiny", name: text})


CONFIG_KEYS = ("max_position_embeddings", "max_seq_len", "num_attention_heads", "num_key_value_heads",
               "intermediate_size")
CONFIGS = st.fixed_dictionaries({}, optional={key: JSON | NUMBER for key in CONFIG_KEYS}) | JSON


@QUICK
@given(CONFIGS, st.sampled_from([1, 2]))
def test_any_checkpoint_config_gives_a_valid_spec_or_one_spec_error_line(config: Any, tensor_parallel: int) -> None:
    """A local checkpoint's config.json is JSON from anywhere: its context and shape are read from it."""
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(config))
        one_line_spec_error({"model": folder, "engine": "fast", "tensor_parallel": tensor_parallel})


# Issue 38: every option, whatever hostile value it gets, is answered by one short line naming it, in under
# a second, from the one check the form, the CLI, a JSON spec and `runners serve` share.
BASES = {  # a valid sweep of each mode, so the option's own check is what answers
    "static": {"model": "tiny", "prompt_len": "fixed:8", "output_len": "fixed:2"},
    "continuous": {"model": "tiny", "engine": "fast", "mode": "continuous", "concurrency": 4, "prompt_len": "fixed:8",
                   "output_len": "fixed:2"},
    "endpoint": {"model": "tiny", "engine": "endpoint", "concurrency": 4, "prompt_len": "fixed:8",
                 "output_len": "fixed:2"},
}
SPEC_FIELD = {f.name: f for f in fields(SweepSpec)}
HOSTILE = {
    "huge": st.integers(min_value=10**17, max_value=10**90),
    "negative": st.integers(min_value=-(10**90), max_value=-1) | st.floats(max_value=-1e-9, allow_infinity=True),
    "zero": st.sampled_from([0, 0.0]),
    "fractional": st.floats(allow_nan=True, allow_infinity=False).filter(lambda x: not float(x).is_integer()),
    "wrong type": (st.booleans() | st.dictionaries(st.text(max_size=5), JSON, max_size=3)
                   | st.lists(st.dictionaries(st.text(max_size=3), JSON, max_size=2), min_size=1, max_size=3)),
    "very long": st.builds(lambda char, n: char * n, st.characters(blacklist_categories=["Cs"]),
                           st.integers(min_value=4097, max_value=50_000)),
    "digits as text": st.builds(lambda sign, n: sign + "9" * n, st.sampled_from(["", "-", "+"]),
                                st.integers(min_value=19, max_value=4000)),
}
NUMERIC = ("int", "float", "list[int]")


def answered(raw: dict[str, Any]) -> tuple[dict[str, str], str | None]:
    """problems(raw) and validate(raw)'s error line, each timed: under a second, every line under 200."""
    start = time.perf_counter()
    found = problems(raw)
    middle = time.perf_counter()
    try:
        validate(raw)
        line = None
    except SpecError as err:
        line = str(err)
    assert middle - start < 1.0 and time.perf_counter() - middle < 1.0
    for message in [*found.values(), line or ""]:
        assert len(message) < 200 and "\n" not in message, message
    return found, line


@settings(deadline=timedelta(seconds=2), max_examples=400,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@example(name="target_interval", hostile=("very long", "0" * 4097), base="static")  # read as 0 (off) once
@given(st.sampled_from(SPEC_FIELDS), st.sampled_from(list(HOSTILE)).flatmap(
    lambda kind: st.tuples(st.just(kind), HOSTILE[kind])), st.sampled_from(list(BASES)))
def test_every_option_answers_any_hostile_value_in_one_short_line_within_a_second(
        name: str, hostile: tuple[str, Any], base: str) -> None:
    kind, value = hostile
    found, line = answered({**BASES[base], name: value})
    declared = SPEC_FIELD[name]
    numeric = declared.type in NUMERIC
    meta = declared.metadata
    allowed_zero = meta.get("least") == 0 and meta.get("above") is None  # e.g. replays, target_interval (0: off)
    must_refuse = (kind in ("huge", "negative", "fractional", "very long")
                   or (kind == "wrong type" and not (declared.type == "bool" and isinstance(value, bool)))
                   or (kind == "zero" and not allowed_zero) or (kind == "digits as text" and numeric))
    if kind == "fractional" and declared.type == "float":  # a fraction within the bounds is a good value
        must_refuse = not meta.get("above", meta.get("least", -1)) < value <= meta.get("most", 0)
    if must_refuse:
        assert name in found, (name, kind, found)
        assert line is not None and line.split(": ", 1)[0] in found
    if numeric and name in found and kind in ("huge", "digits as text"):
        assert "… (" in found[name] or len(str(value)) <= 32, found[name]  # cut: first digits and the length


def sixty_digits(sign: str = "") -> str:
    return sign + "1" + "0" * 59


@pytest.mark.parametrize("name", [f.name for f in fields(SweepSpec) if f.type in NUMERIC])
@pytest.mark.parametrize("as_text", [False, True])  # JSON's number, or the CLI's and the form's text
def test_a_sixty_digit_value_in_any_numeric_option_is_named_within_a_second(name: str, as_text: bool) -> None:
    value = sixty_digits() if as_text else int(sixty_digits())
    for base in BASES.values():
        found, line = answered({**base, name: value})
        assert found[name].startswith(f"{name} must be at most "), found[name]
        assert found[name].endswith("got 10000000000000000000… (60 digits)"), found[name]


@pytest.mark.parametrize("name", [f.name for f in fields(SweepSpec) if f.type == "str"])
@pytest.mark.parametrize("value", [{"first": "a"}, ["a"], 7, True])
def test_every_text_option_refuses_another_json_type(name: str, value: Any) -> None:
    found, _ = answered({**BASES["endpoint"], name: value})
    kind = {dict: "an object", list: "a list", int: "a number", bool: "true/false"}[type(value)]
    assert found[name] == f"{name} is text, not {kind}: {value!r}"


def test_every_numeric_option_declares_its_bounds_and_every_text_option_its_length() -> None:
    """What the check above reads: an option added without bounds would take any number."""
    for declared in fields(SweepSpec):
        meta = declared.metadata
        if declared.type == "int":
            assert {"least", "most"} <= set(meta), declared.name
        elif declared.type == "float":
            assert "most" in meta and ("least" in meta or "above" in meta), declared.name
        elif declared.type == "list[int]":
            assert "most" in meta, declared.name
        else:
            assert declared.type in ("str", "bool") and meta["longest"] > 0, declared.name
