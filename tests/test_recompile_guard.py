"""The recompile guard (tests/recompile_guard.py) makes a test err when torch.compile gave up compiling in it."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

INNER = '''
import torch

def test_compiles_one_function_for_three_dtypes():
    torch._dynamo.config.recompile_limit = 1
    double = torch.compile(lambda x: x * 2, backend="eager")
    for dtype in (torch.float32, torch.float64, torch.int32):
        double(torch.ones(2, dtype=dtype))

def test_compiles_one_function_once():
    double = torch.compile(lambda x: x * 2, backend="eager")
    assert double(torch.ones(2)).tolist() == [2.0, 2.0]
'''


def test_a_test_that_hits_the_recompile_limit_errs_and_one_that_does_not_passes(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    pytester.makepyfile(test_inner=INNER)
    pytester.makeconftest('pytest_plugins = ["tests.recompile_guard"]')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2, errors=1)  # the first errs in teardown, after its call ran
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*torch.compile hit its recompile limit in this test*"])
