"""The one seeded source of a sweep's requests, for every mode: their lengths (SweepSpec.request_lengths,
torch-free so the app predicts the same), their prompt ids, and when they arrive.

Each mode keeps the seed formula its runs were made with, as data, so the greedy tokens of a run
repeat exactly: a static point draws its own prompts per batch size, while every continuous point
serves one workload so points differ only in load and limits.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from runners.engines.base import Batch
from runners.spec import SweepSpec


@dataclass(frozen=True)
class IdSeed:
    """Prompt ids of `size` requests in a repeat come from seed × 1_000_003 + size × per_size + repeat + offset."""

    per_size: int
    offset: int


STATIC = IdSeed(per_size=1_009, offset=17)
CONTINUOUS = IdSeed(per_size=0, offset=29)


def draw(spec: SweepSpec, size: int, repeat: int, vocab: int, ids: IdSeed) -> Batch:
    """`size` requests of one repeat: random prompt ids in [1, vocab) and forced output lengths."""
    prompts, outputs = spec.request_lengths(size, repeat)
    gen = torch.Generator().manual_seed(spec.seed * 1_000_003 + size * ids.per_size + repeat + ids.offset)
    flat = torch.randint(1, vocab, (sum(prompts),), generator=gen).tolist()
    rows, start = [], 0
    for p in prompts:
        rows.append(flat[start:start + p])
        start += p
    return Batch(prompt_ids=rows, output_lens=outputs)


# Common English words, each one token with its leading space in the Llama 3, Qwen2 and Mistral vocabularies
TEXT_WORDS = tuple("""the of and to in is for on that with as was at by it from be this are or an have not but
his they you which one had were all their can has more will been also new other two time some when there
first about after would its into only most over year may city people than state world such years these
many between through work part made like under where well school family before during just three life
group back both each much used way early while since long known day own then house water number name""".split())


def text_prompt(ids: list[int]) -> str:
    """A text prompt of as many words as `ids` has tokens, each word picked by its id: a server that takes
    only text gets the same workload, within the tokenizer's tolerance (docs/run-folder.md)."""
    return " ".join(TEXT_WORDS[i % len(TEXT_WORDS)] for i in ids)


def arrival_seed(spec: SweepSpec, repeat: int) -> int:
    """Seeds a repeat's Poisson arrival times (runners.engines.scheduler.Arrivals)."""
    return spec.seed * 7919 + repeat
