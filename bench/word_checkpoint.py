"""A checkpoint that a third-party server (`transformers serve`) loads with no download: a preset's random
weights, built exactly as BatchScope's in-process engine builds them (runners.engines.models.load, same seed), saved
with a word-level tokenizer and a two-token chat template.

Every word of the workload (runners.workload.workload.TEXT_WORDS) is one token, so a text prompt of N words is N
prompt tokens on the server too, and the chat template adds exactly its two role tokens. The rest of the
vocabulary is filler words (`w<id>`), so whatever id a random model generates decodes to one word and
streams as one chunk. tests/test_endpoint_transformers.py writes a tiny one; bench/transformers_serve.sh
writes one in the shape of a real preset into a Hugging Face cache folder, where transformers 5.17's
`/v1/models` looks for models (it lists the cache, not a model pinned by path).

    python3 bench/word_checkpoint.py --model llama-3.2-1b --hub /tmp/hub [--device cuda] [--dtype bfloat16]
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models as token_models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runners.engines import models  # noqa: E402
from runners.workload.workload import TEXT_WORDS  # noqa: E402

SPECIAL = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>"]  # ids 0, 1, 2: unk, bos, eos as Llama's config
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")  # two tokens around one user message
ORG = "batchscope"  # the hub cache's owner of the checkpoints written here


def word_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """The special tokens, the workload's words, then filler words up to `vocab_size`; split on whitespace,
    decoded joined by spaces."""
    words = [*SPECIAL, *TEXT_WORDS]
    if vocab_size < len(words):
        raise ValueError(f"a vocabulary of {vocab_size} cannot hold the {len(words)} special tokens and words")
    vocab = {word: i for i, word in enumerate([*words, *(f"w{i}" for i in range(len(words), vocab_size))])}
    tokenizer = Tokenizer(token_models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # word-level pieces joined by spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = TEMPLATE
    return fast


def write(model: str, folder: Path, dtype: str = "float32", seed: int = 0, device: str = "cpu") -> Path:
    """The preset `model` with its random weights and the word tokenizer, saved into `folder`."""
    loaded = models.load(model, dtype, torch.device(device), seed)
    tokenizer = word_tokenizer(loaded.config.vocab_size)
    for config in (loaded.model.config, loaded.model.generation_config):  # the tokenizer's ids, whatever the preset
        config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    tokenizer.save_pretrained(folder)
    loaded.model.save_pretrained(folder)
    return folder


def write_to_hub(model: str, hub: Path, dtype: str, seed: int, device: str) -> str:
    """The checkpoint as a Hugging Face cache holds a downloaded repo (refs/main names a snapshot folder):
    its repo id, which a server started with HF_HUB_CACHE=hub and HF_HUB_OFFLINE=1 loads and lists."""
    repo = f"{ORG}/{model}"
    root = hub / f"models--{ORG}--{model}"
    commit = hashlib.sha1(f"{model} {dtype} seed {seed}".encode()).hexdigest()
    write(model, root / "snapshots" / commit, dtype, seed, device)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    return repo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a preset (runners/engines/presets.py)")
    parser.add_argument("--hub", type=Path, required=True, help="the Hugging Face cache folder to write into")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--seed", type=int, default=0, help="seeds the random weights, as a sweep's --seed")
    parser.add_argument("--device", default="cpu", help="where the weights are drawn (cuda is faster for 8B)")
    args = parser.parse_args()
    print(write_to_hub(args.model, args.hub, args.dtype, args.seed, args.device))


if __name__ == "__main__":
    main()
