"""Makes a test err (in teardown) when torch.compile hit its recompile limit during it. Past the limit Dynamo
quietly runs the function eagerly, so a measured step is no longer the compiled one and a GPU test can fail
far from the cause (issue 36: the fp8 accuracy tests failed only inside a whole `pytest -m gpu` run).

GPU tests start from an empty Dynamo cache: a real run is one process with one model, while one pytest
process builds dozens, and every model adds guard entries to the same compiled code objects."""
from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

import pytest

LIMIT_HIT = ("recompile_limit", "cache_size_limit")  # the second is the name before torch 2.6


class RecompileLimitLog(logging.Handler):
    """Keeps every Dynamo warning that says a function hit the recompile limit."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.hits: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(name in message for name in LIMIT_HIT):
            self.hits.append(message)


@pytest.fixture(autouse=True)
def fail_on_recompile_limit(request: pytest.FixtureRequest) -> Iterator[None]:
    if "torch" not in sys.modules:  # an app-side test: nothing compiles
        yield
        return
    import torch

    if request.node.get_closest_marker("gpu") is not None:
        torch._dynamo.reset()
    log = RecompileLimitLog()
    dynamo = logging.getLogger("torch._dynamo")
    dynamo.addHandler(log)
    try:
        yield
    finally:
        dynamo.removeHandler(log)
    if log.hits:
        pytest.fail("torch.compile hit its recompile limit in this test:\n" + log.hits[0], pytrace=False)
