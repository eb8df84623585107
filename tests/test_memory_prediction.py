"""Model facts without torch agree with the runner's; memory split and predicted memory hand-checked."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

from batchscope.analysis import memory_split, model_facts, predict_memory, predict_memory_for_spec
from runners.engines.presets import PRESETS
from runners.spec import SweepSpec

MODEL = {"weight_bytes": 2_000_000_000, "kv_bytes_per_token": 100_000}


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
def test_model_facts_agree_with_runner_describe(preset: str, dtype: str) -> None:
    from runners.engines.models import describe, model_config  # the runner side, with torch

    assert model_facts(preset, dtype) == asdict(describe(preset, model_config(preset), dtype))


def test_model_facts_of_a_local_checkpoint_agree(tmp_path: Path) -> None:
    from runners.engines.models import describe, model_config

    (tmp_path / "config.json").write_text(json.dumps(PRESETS["qwen2.5-7b"]))
    name = str(tmp_path)
    facts = model_facts(name, "bfloat16")
    assert facts == asdict(describe(name, model_config(name), "bfloat16"))
    assert facts["source"] == "local"


def test_model_facts_of_tiny_by_hand() -> None:
    facts = model_facts("tiny", "bfloat16")
    # hidden 64, heads 4 → head_dim 16, kv_heads 2, inter 128, layers 2, vocab 512, untied
    # attention 64·4·16 + 2·64·2·16 + 4·16·64 = 12 288; MLP 3·64·128 = 24 576; norms 2·64 = 128 → 36 992/layer
    # 2 layers 73 984 + embed 32 768 + lm_head 32 768 + final norm 64 = 139 584
    assert facts["params"] == 139_584
    assert facts["weight_bytes"] == 279_168
    # KV 2 (K and V) · 2 layers · 2 kv heads · 16 · 2 B = 256 B/token
    assert facts["kv_bytes_per_token"] == 256


def test_unknown_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a preset"):
        model_facts(str(tmp_path), "bfloat16")


def test_predict_memory_by_hand() -> None:
    table = predict_memory(MODEL, [1, 2, 4], prompt_lens=[100, 300, 200, 50], output_lens=[10, 20, 5, 40],
                           capacity_bytes=2_100_000_000)
    # B=1: (100 + 10) × 1e5 = 1.1e7 → 2.011e9; B=2: 2 × (300 + 20) × 1e5 = 6.4e7 → 2.064e9
    # B=4: 4 × (300 + 40) × 1e5 = 1.36e8 → 2.136e9 > 2.1e9
    assert table["kv_bytes"].tolist() == [11_000_000, 64_000_000, 136_000_000]
    assert table["total_bytes"].tolist() == [2_011_000_000, 2_064_000_000, 2_136_000_000]
    assert table["fits"].tolist() == [True, True, False]
    # 2.011e9 / 2.1e9 = 96 % of capacity: fits but tight
    assert table["message"][0].startswith("Tight: batch 1 needs 1.9 GiB for weights + KV, 96 % of 2.0 GiB")
    assert table["message"][2].startswith("Will not fit: batch 4 needs 2.0 GiB")


def test_predict_memory_with_room_and_without_capacity() -> None:
    roomy = predict_memory(MODEL, [1], [100], [10], capacity_bytes=10 * 1024**3)
    # 2.011e9 B = 1.87 GiB of 10 GiB = 19 %
    assert roomy["message"][0] == "Fits: batch 1 needs 1.9 GiB for weights + KV, 19 % of 10.0 GiB."
    unknown = predict_memory(MODEL, [1], [100], [10], capacity_bytes=None)
    assert pd.isna(unknown["fits"][0]) and "capacity unknown" in unknown["message"][0]


def test_predict_memory_for_spec_uses_the_runner_lengths() -> None:
    spec = SweepSpec(model="tiny", batch_sizes=[1, 8], prompt_len="fixed:128", output_len="fixed:32")
    table = predict_memory_for_spec(MODEL, spec, capacity_bytes=None)
    # KV B × (128 + 32) × 1e5: 1.6e7 and 1.28e8
    assert table["kv_bytes"].tolist() == [16_000_000, 128_000_000]


def test_predict_memory_for_spec_covers_warmup_repeats() -> None:
    spec = SweepSpec(model="tiny", batch_sizes=[4], prompt_len="uniform:1:1000", output_len="fixed:1", warmup=2)
    longest = max(max(spec.request_lengths(4, r)[0]) for r in spec.repeat_indices())
    assert spec.repeat_indices()[0] == -2  # the warm-up draws, and every measured draw the budget allows
    assert predict_memory_for_spec(MODEL, spec, None)["max_prompt_len"][0] == longest


def test_continuous_prediction_is_the_slot_cache_the_engine_allocates() -> None:
    from runners.spec import validate

    spec = validate({"model": "tiny", "engine": "fast", "mode": "continuous", "max_num_seqs": "1,4",
                     "arrival": "poisson:8", "num_requests": 5, "prompt_len": "fixed:100", "output_len": "fixed:20"})
    table = predict_memory_for_spec(MODEL, spec, capacity_bytes=40_000_000 + 2_000_000_000)
    # longest request 100 + 20 = 120 tokens, rounded up to the cache alignment of 64 → 128 per slot;
    # KV = slots × 128 × 1e5: 1.28e7 for 1 slot, 5.12e7 for 4 (over the 4e7 left after the weights)
    assert table["batch_size"].tolist() == [1, 4] and table["tokens_per_row"].tolist() == [128, 128]
    assert table["kv_bytes"].tolist() == [12_800_000, 51_200_000]
    assert table["fits"].tolist() == [True, False]
    assert table["message"][1].startswith("Will not fit: max_num_seqs 4 needs 1.9 GiB")
    rates = validate({**spec.to_dict(), "max_num_seqs": 8, "arrival": "poisson:1,2,4"})
    assert predict_memory_for_spec(MODEL, rates, None)["batch_size"].tolist() == [8]  # one limit, three rates


def test_memory_split_long_table() -> None:
    points = pd.DataFrame({
        "run_id": ["r", "r", "r"], "batch_size": [1, 2, 4], "status": ["ok", "ok", "oom"],
        "mem_capacity": [1000, 1000, 1000], "mem_weights": [100, 100, None], "mem_kv_allocated": [50, None, None],
        "mem_kv_used": [30, 60, None], "mem_activations": [10, None, None], "mem_allocator_reserve": [5, None, None],
        "mem_other": [7, 9, None], "mem_nvml_used": [152, None, None],
    })
    split = memory_split(points)
    one = split[split["batch_size"] == 1]
    # kv_unused = 50 − 30 = 20
    assert dict(zip(one["part"].astype(str), one["bytes"])) == {
        "weights": 100, "kv_used": 30, "kv_unused": 20, "activations": 10, "allocator_reserve": 5, "other": 7}
    assert set(one["capacity"]) == {1000}
    # batch 2 (a CPU-like point) reports no allocator parts; the OOM point reports nothing
    assert split[split["batch_size"] == 2]["part"].astype(str).tolist() == ["weights", "kv_used", "other"]
    assert 4 not in set(split["batch_size"])
    assert list(split.columns) == ["run_id", "batch_size", "x", "status", "part", "bytes", "capacity"]


def test_a_point_with_no_split_but_its_devices_count_has_that_count_as_its_one_part() -> None:
    """An endpoint's points: the model runs in the server, so NVML's whole-device count is all there is."""
    nothing = [None, None, None]
    points = pd.DataFrame({
        "run_id": ["e", "e", "e"], "batch_size": [1, 16, 64], "status": ["ok", "ok", "error"],
        "mem_capacity": [2000, 2000, None], "mem_weights": nothing, "mem_kv_allocated": nothing, "mem_kv_used": nothing,
        "mem_activations": nothing, "mem_allocator_reserve": nothing, "mem_other": nothing,
        "mem_nvml_used": [1500, 1510, None],
    })
    split = memory_split(points)
    assert split["part"].astype(str).tolist() == ["nvml_used", "nvml_used"]
    assert split["bytes"].tolist() == [1500, 1510] and split["batch_size"].tolist() == [1, 16]
    assert set(split["capacity"]) == {2000}
