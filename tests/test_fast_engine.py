"""The `fast` engine gives HF's greedy tokens (CPU, float32) and HF's logits (GPU, bfloat16)."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from runners.engines import ragged
from runners.engines.base import Batch
from runners.engines.fast import FastEngine
from runners.engines.models import LoadedModel, describe, load
from runners.engines.ragged import Chunk

SMALL = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=300, max_position_embeddings=512, rms_norm_eps=1e-6)
CONFIGS = {
    "llama3-rope-tied": dict(model_type="llama", tie_word_embeddings=True, rope_theta=500000.0,
                             rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                               high_freq_factor=4.0,
                                               original_max_position_embeddings=16)),
    "mistral": dict(model_type="mistral", tie_word_embeddings=False, rope_theta=1e6, sliding_window=None),
    "qwen2": dict(model_type="qwen2", tie_word_embeddings=False, rope_theta=1e6, num_key_value_heads=1),
    "llama-mha": dict(model_type="llama", tie_word_embeddings=False, num_key_value_heads=4),
}


def small_model(name: str, dtype: torch.dtype = torch.float32, device: str = "cpu", std: float = 0.08,
                **overrides) -> LoadedModel:
    """A random-weight model of one config family; biases (Qwen2) made non-zero so they matter."""
    fields = {**SMALL, **CONFIGS[name], **overrides}
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, std)
                if module.bias is not None:
                    module.bias.normal_(0.0, 0.1)
    info = describe(name, config, str(dtype).removeprefix("torch."))
    return LoadedModel(model=model, config=config, info=info, device=torch.device(device), dtype=dtype)


@torch.no_grad()
def hf_greedy(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    """The reference: HF's full forward over the growing sequence, one row, no padding, argmax."""
    ids = torch.tensor([prompt], device=model.device)
    out = []
    for _ in range(n):
        nxt = model(input_ids=ids).logits[0, -1].argmax()
        out.append(int(nxt))
        ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
    return out


def random_batch(vocab: int, prompt_lens: list[int], output_lens: list[int], seed: int) -> Batch:
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, vocab, (n,), generator=g).tolist() for n in prompt_lens]
    return Batch(prompt_ids=prompts, output_lens=output_lens)


def check_against_hf(loaded: LoadedModel, batches: list[Batch]) -> None:
    expected = [[hf_greedy(loaded.model, p, max(b.output_lens)) for p in b.prompt_ids] for b in batches]
    engine = FastEngine(loaded)
    engine.setup(max(b.size for b in batches), max(max(b.prompt_lens) for b in batches),
                 max(max(b.output_lens) for b in batches))
    for batch, want in zip(batches, expected):
        gen = engine.generate(batch)
        assert gen.tokens == want
        assert len(gen.token_ms) == max(batch.output_lens)
        assert gen.timing == "perf_counter"
        assert all(b >= a for a, b in zip(gen.token_ms, gen.token_ms[1:]))


MIXED = ([7, 1, 13, 4], [6, 2, 6, 1])


@pytest.mark.parametrize("name", list(CONFIGS))
def test_small_configs_match_hf_greedy_with_mixed_prompt_lengths(name: str) -> None:
    loaded = small_model(name)
    vocab = loaded.config.vocab_size
    # mixed lengths (padding mask), then equal lengths (causal kernel) through the same buffers
    check_against_hf(loaded, [random_batch(vocab, *MIXED, seed=1),
                              random_batch(vocab, [9, 9, 9, 9], [5, 5, 5, 5], seed=2)])


def test_tiny_preset_matches_hf_greedy() -> None:
    loaded = load("tiny", "float32", torch.device("cpu"), seed=3)
    check_against_hf(loaded, [random_batch(loaded.config.vocab_size, [20, 3, 11], [8, 8, 2], seed=4)])


def test_hf_model_still_works_on_the_shared_weights() -> None:
    loaded = small_model("qwen2")
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        before = loaded.model(input_ids=ids).logits
        engine = FastEngine(loaded)
        after = loaded.model(input_ids=ids).logits
    assert torch.equal(before, after)
    qkv = engine.decoder.layers[0].wqkv
    q_proj = loaded.model.model.layers[0].self_attn.q_proj.weight
    assert q_proj.data_ptr() == qkv.data_ptr()  # a view of the fused weight, not a second copy


def test_batch_that_does_not_fit_the_shape_sets_it_up_again() -> None:
    loaded = small_model("mistral")
    engine = FastEngine(loaded)
    engine.setup(2, 4, 2)
    batch = random_batch(loaded.config.vocab_size, [3, 10, 6], [4, 4, 4], seed=5)
    gen = engine.generate(batch)
    assert engine.shape == (3, 10, 4)
    assert gen.tokens == [hf_greedy(loaded.model, p, 4) for p in batch.prompt_ids]
    assert gen.kv_allocated_bytes == 2 * 2 * 3 * 2 * 64 * 16 * 4  # k+v, layers, slots, heads, len, dim, fp32


def test_a_static_step_reads_no_cache_row_past_what_the_batch_has_written() -> None:
    # a cache of 256 positions a slot for a batch that fills 10: NaN in every row it has not written would turn
    # any step that read them (even masked: NaN × 0 is NaN) into NaN logits, and the tokens away from HF's
    loaded = small_model("llama-mha")
    engine = FastEngine(loaded)
    engine.setup(2, 6, 200)
    assert engine.state.max_len == 256
    for cache in engine.state.k + engine.state.v:
        cache.fill_(float("nan"))
    batch = random_batch(loaded.config.vocab_size, [6, 3], [4, 4], seed=7)
    assert engine.generate(batch).tokens == [hf_greedy(loaded.model, p, 4) for p in batch.prompt_ids]


def test_sliding_window_beyond_its_length_is_refused() -> None:
    loaded = small_model("mistral", sliding_window=8)
    with pytest.raises(ValueError, match="sliding window"):
        FastEngine(loaded).setup(1, 6, 4)


GPU_SHAPE = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
                 num_key_value_heads=4, vocab_size=4096)


@pytest.mark.gpu
def test_gpu_bf16_logits_match_hf_and_graph_replays_like_eager() -> None:
    loaded = small_model("llama3-rope-tied", torch.bfloat16, "cuda", std=0.02, **GPU_SHAPE)
    batch = random_batch(4096, [37, 5, 64, 64], [12, 12, 3, 12], seed=6)
    with torch.no_grad():
        want = [loaded.model(input_ids=torch.tensor([p], device="cuda")).logits[0, -1].float()
                for p in batch.prompt_ids]
    eager = FastEngine(loaded, compile=False, graphs=False)
    eager.setup(4, 64, 12)
    got = eager.decoder.prefill(eager._pack(batch.prompt_ids, 64), eager.state).float()
    rel = [float((got[row] - want[row]).norm() / want[row].norm()) for row in range(4)]
    assert max(rel) < 1e-2, rel
    reference = eager.generate(batch).tokens
    graphed = FastEngine(loaded, compile=False, graphs=True)
    gen = graphed.generate(batch)
    assert gen.timing == "cuda_events"
    assert gen.tokens == reference
    compiled = FastEngine(loaded, compile=True, graphs=True).generate(batch).tokens
    same = sum(a == b for x, y in zip(compiled, reference) for a, b in zip(x, y))
    assert same >= 0.9 * 4 * 12  # compiled kernels round differently; greedy may flip near ties


@pytest.mark.gpu
def test_gpu_graph_reads_no_cache_row_past_what_the_batch_has_written() -> None:
    # the compiled, captured step over a cache of 1 024 positions a slot, for a batch that fills under 80: NaN in
    # every row not yet written leaves the tokens of a clean cache (a masked read of NaN would be NaN)
    loaded = small_model("llama3-rope-tied", torch.bfloat16, "cuda", std=0.02, **GPU_SHAPE)
    engine = FastEngine(loaded)
    engine.setup(4, 64, 960)
    batch = random_batch(4096, [37, 5, 64, 64], [12, 12, 3, 12], seed=6)
    clean = engine.generate(batch).tokens
    for cache in engine.state.k + engine.state.v:
        cache.fill_(float("nan"))
    assert engine.generate(batch).tokens == clean


@pytest.mark.gpu
def test_gpu_batch_of_one_replays_its_prefill_graph_like_the_packed_forward() -> None:
    loaded = small_model("qwen2", torch.bfloat16, "cuda", std=0.02, **GPU_SHAPE)
    graphed = FastEngine(loaded)
    graphed.setup(1, 300, 8)
    assert graphed.lone is not None and graphed.lone.sizes[-1] == 320
    eager = FastEngine(loaded, compile=False, graphs=False)
    for length, seed in ((5, 1), (64, 2), (65, 3), (300, 4)):  # bucket edges, and padding
        batch = random_batch(4096, [length], [8], seed=seed)
        want = eager.generate(batch)
        got = graphed.generate(batch)
        assert got.tokens[0][0] == want.tokens[0][0]  # the prefill's own token
        assert sum(a == b for a, b in zip(got.tokens[0], want.tokens[0])) >= 6
    replayed = graphed.lone.run(0, batch.prompt_ids[0]).float()
    packed = eager.decoder.prefill(eager._pack(batch.prompt_ids, 300), eager.state).float()
    assert float((replayed - packed).norm() / packed.norm()) < 1e-2


@pytest.mark.gpu
def test_gpu_ragged_flash_attention_equals_the_masked_reference() -> None:
    """Chunks of different lengths, a continuation (more keys than queries) and grouped KV heads."""
    torch.manual_seed(0)
    chunks = [Chunk(0, 0, [1] * 37), Chunk(1, 20, [1] * 5), Chunk(2, 0, [1] * 1), Chunk(3, 64, [1] * 64)]
    batch = ragged.pack(chunks, torch.device("cuda"))
    q = torch.randn(batch.tokens, 8, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch.key_pos.numel(), 2, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    flash = ragged.attention(q, k, v, batch).float()
    reference = ragged.attention(q.float(), k.float(), v.float(), batch)  # float32 takes the masked SDPA loop
    assert float((flash - reference).norm() / reference.norm()) < 2e-2
