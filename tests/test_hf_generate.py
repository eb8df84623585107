"""The hf-generate engine runs generate() with the attention backends it names (cuDNN's left out, since it builds
a graph per new key length that a draw's random lengths would pay inside measured steps), says so in its
version, and leaves torch's own choice untouched outside generate() and when told to."""
from __future__ import annotations

import pytest
import torch

from runners.engines.base import Batch
from runners.engines.hf_generate import HFGenerateEngine
from runners.engines.models import load

BACKEND_FLAGS = {"cudnn": torch.backends.cuda.cudnn_sdp_enabled, "flash": torch.backends.cuda.flash_sdp_enabled,
                 "efficient": torch.backends.cuda.mem_efficient_sdp_enabled, "math": torch.backends.cuda.math_sdp_enabled}


def backends_seen_by_the_model(engine: HFGenerateEngine) -> list[dict[str, bool]]:
    """What torch would let attention use, read inside every forward of one short generate."""
    seen: list[dict[str, bool]] = []
    hook = engine.model.register_forward_pre_hook(
        lambda module, args: seen.append({name: flag() for name, flag in BACKEND_FLAGS.items()}))
    try:
        engine.generate(Batch(prompt_ids=[[5, 6, 7], [8, 9]], output_lens=[3, 3]))
    finally:
        hook.remove()
    return seen


def test_generate_runs_with_cudnn_attention_off_and_the_rest_on_then_gives_torchs_choice_back() -> None:
    engine = HFGenerateEngine(load("tiny", "float32", torch.device("cpu")))
    before = {name: flag() for name, flag in BACKEND_FLAGS.items()}
    seen = backends_seen_by_the_model(engine)
    assert len(seen) == 3  # one prefill and two decode steps, each under the same choice
    assert all(step == {"cudnn": False, "flash": True, "efficient": True, "math": True} for step in seen)
    assert {name: flag() for name, flag in BACKEND_FLAGS.items()} == before
    assert "attention flash_attention/efficient_attention/math" in engine.version()


def test_an_engine_told_to_leave_attention_alone_runs_under_torchs_own_choice() -> None:
    engine = HFGenerateEngine(load("tiny", "float32", torch.device("cpu")), attention=None)
    before = {name: flag() for name, flag in BACKEND_FLAGS.items()}
    assert before["cudnn"]  # torch's default, which the first test needs to see switched off
    assert all(step == before for step in backends_seen_by_the_model(engine))
    assert engine.version().endswith("attention torch's choice)")


def attention_ops(engine: HFGenerateEngine) -> set[str]:
    """The scaled-dot-product attention ops (aten's, one per backend) a short left-padded generate ran."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        engine.generate(Batch(prompt_ids=[list(range(10, 300)), list(range(10, 200))], output_lens=[4, 4]))
    return {event.key for event in profile.key_averages() if "scaled_dot_product" in event.key}


@pytest.mark.gpu
def test_on_a_gpu_generate_runs_no_cudnn_attention_where_torch_would_choose_it() -> None:
    loaded = load("llama-3.2-1b", "bfloat16", torch.device("cuda", 0))
    if not any("cudnn" in op for op in attention_ops(HFGenerateEngine(loaded, attention=None))):
        pytest.skip("torch does not choose cuDNN's attention on this GPU, so there is nothing to leave out")
    ops = attention_ops(HFGenerateEngine(loaded))
    assert ops and not any("cudnn" in op for op in ops), ops
