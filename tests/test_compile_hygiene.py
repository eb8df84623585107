"""Nothing compiles inside a measured step: setup warms every shape a step can take.

Runs the compiled engines on CPU (Inductor) under torch.compiler's "fail_on_recompile" stance, so a
measured prefill or decode that would compile raises instead of silently costing a step.
"""
from __future__ import annotations

import random

import torch

from runners.engines.base import Batch
from runners.engines.continuous import ContinuousEngine
from runners.engines.fast import FastEngine
from runners.engines.models import load


def test_measured_static_and_continuous_steps_never_compile() -> None:
    loaded = load("tiny", "float32", torch.device("cpu"), seed=3)
    static = FastEngine(loaded, compile=True, graphs=False)
    rng = random.Random(0)
    static.setup(4, 40, 8)
    served = ContinuousEngine(static.decoder, torch.device("cpu"))
    served.setup(8, 200)
    prompts = [[rng.randint(1, 500) for _ in range(rng.randint(1, 150))] for _ in range(24)]
    outputs = [rng.randint(1, 30) for _ in prompts]
    with torch.compiler.set_stance("fail_on_recompile"):
        for _ in range(2):  # prompt lengths other than the set-up shape's, mixed
            static.generate(Batch([[rng.randint(1, 500) for _ in range(rng.randint(2, 40))] for _ in range(4)], [8] * 4))
        result = served.run(prompts, outputs, {"concurrency": 6, "seed": 0}, 64)
    assert any(s.prefill_tokens and s.decode_tokens for s in result.steps)  # mixed steps ran
    assert any(s.prefill_tokens == 64 for s in result.steps)  # and chunked ones
