"""`hf-generate`: plain `model.generate()`, left-padded static batches — the reference a typical user has.

Per-token times come from a streamer: generate() moves each new token to the host (`.cpu()`), which
synchronises the device, so a host clock read at that moment is a device-complete timestamp.

Attention runs without cuDNN's backend, which torch prefers on Hopper: it builds a graph for each new shape, and a
draw's lengths are random, so no setup could warm every one. On an H100 (bench/hf_first_shapes.py, twenty-third
session) a first pass over unseen key lengths ran at 51.7 ms a decode step with cuDNN and 11.7 ms with flash
attention; every later pass at 12–13 ms either way.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any

import torch
import transformers
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from runners import cancel

from runners.engines.base import Batch, Generation
from runners.engines.models import LoadedModel

PAD_ID = 0
ATTENTION = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)  # not cuDNN: see above


class _TokenClock(BaseStreamer):
    """Records when each generated token reaches the host; the first put() is the prompt."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.token_ms: list[float] = []
        self._seen_prompt = False

    def put(self, value: torch.Tensor) -> None:
        now = time.perf_counter()
        if not self._seen_prompt:
            self._seen_prompt = True
            return
        self.token_ms.append((now - self.start) * 1000.0)

    def end(self) -> None:
        pass


class _StopOnCancel(StoppingCriteria):
    """Lets a SIGTERM end generate() at the next step instead of after the whole batch."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), cancel.requested(), dtype=torch.bool, device=input_ids.device)


class HFGenerateEngine:
    name = "hf-generate"

    def __init__(self, loaded: LoadedModel, attention: tuple[SDPBackend, ...] | None = ATTENTION) -> None:
        """`attention`: the backends torch may choose from; None leaves torch's own choice (the bench that
        times what cuDNN's per-length graphs cost)."""
        self.loaded = loaded
        self.model = loaded.model
        self.attention = attention

    def facts(self) -> dict[str, Any]:
        return {}

    def version(self) -> str:
        backends = "/".join(b.name.lower() for b in self.attention) if self.attention else "torch's choice"
        return (f"hf-generate (transformers {transformers.__version__}, torch {torch.__version__}, "
                f"attention {backends})")

    def setup(self, batch_size: int, max_prompt_len: int, max_output_len: int) -> float:
        return 0.0  # generate() allocates its cache on the fly; nothing to prepare per shape

    def release(self) -> None:
        if self.loaded.device.type == "cuda":
            torch.cuda.empty_cache()

    @torch.inference_mode()
    def generate(self, batch: Batch) -> Generation:
        device = self.loaded.device
        longest = max(batch.prompt_lens)
        new_tokens = max(batch.output_lens)
        ids = torch.full((batch.size, longest), PAD_ID, dtype=torch.long)
        mask = torch.zeros((batch.size, longest), dtype=torch.long)
        for row, prompt in enumerate(batch.prompt_ids):
            ids[row, longest - len(prompt):] = torch.tensor(prompt)
            mask[row, longest - len(prompt):] = 1
        ids, mask = ids.to(device), mask.to(device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        clock = _TokenClock(time.perf_counter())
        with sdpa_kernel(list(self.attention)) if self.attention else contextlib.nullcontext():
            out = self.model.generate(
                input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=new_tokens,
                min_new_tokens=new_tokens, pad_token_id=PAD_ID, streamer=clock,
                stopping_criteria=StoppingCriteriaList([_StopOnCancel()]),
            )
        cancel.check()
        generated = out[:, longest:].tolist()
        kv_bytes = batch.size * (longest + new_tokens) * self.loaded.info.kv_bytes_per_token
        return Generation(token_ms=clock.token_ms, tokens=generated, timing="perf_counter",
                          kv_allocated_bytes=kv_bytes)
