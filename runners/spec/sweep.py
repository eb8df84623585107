"""The sweep spec: every option of a sweep, declared once with its help, defaults and request lengths.

Torch-free on purpose, so the New sweep page flags the same errors next to each field that the runner
would reject with exit code 2. The per-mode checks and points live beside this module (static,
continuous, parallel); device checks (can this GPU run bfloat16?) live in `runners.devices`.
"""
from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runners import distributions
from runners.presets import PRESETS
from runners.quant_layout import QUANT_DTYPES
from runners.spec.options import SpecError, option

DTYPES = ("float32", "bfloat16", "float16", *QUANT_DTYPES)
ENGINES = ("hf-generate", "fast")
ON_OOM = ("stop", "continue")
DEFAULT_MAX_BATCH_SIZE = 4096
MIN_TELEMETRY_HZ = 20.0
SLO_METRICS = ("ttft", "itl", "e2e")
PARALLEL = "several processes (static mode; one rank per GPU, on CPU processes sharing the host)"
CONTINUOUS = "continuous mode (one of --max-num-seqs, --arrival, --concurrency may list values to sweep)"
REFINE = "refinement (points the runner adds after the planned ones, along the sweep's axis)"


@dataclass
class SweepSpec:
    model: str = option(help=f"preset ({', '.join(PRESETS)}) or a local HF checkpoint dir")
    dtype: str = option("bfloat16", help="float32, bfloat16, float16, or with --engine fast: fp8, fp8-dynamic, "
                                         "int8 (quantised weights, bfloat16 activations and KV cache)")
    engine: str = option("hf-generate", help="hf-generate or fast")
    mode: str = option("static", help="static (default) or continuous (fast engine; options below)")
    batch_sizes: list[int] = option(factory=lambda: [1, 2, 4, 8], help="1,2,4 or pow2:1:256")
    prompt_len: str = option("fixed:128", help=distributions.SYNTAX)
    output_len: str = option("fixed:32", help="same syntax as --prompt-len")
    repeats: int = option(3, help="measured repeats per point (default 3)")
    warmup: int = option(1, help="warm-up repeats per point (default 1)")
    seed: int = option(0, help="seeds the request lengths, prompt ids, arrivals and random weights")
    device: str = option("auto", help="auto, cpu, cuda or cuda:N")
    max_batch_size: int = option(DEFAULT_MAX_BATCH_SIZE, help="ceiling on batch sizes (default 4096)")
    on_oom: str = option("stop", help="stop (default) or continue")
    telemetry_hz: float = option(20.0, help="utilisation samples per second (20 to 1000)")
    calibrate: bool = option(True, help="measure the device's copy bandwidth and matmul rate before the points")
    name: str = option("", help="a label for the run")
    tensor_parallel: int = option(1, group=PARALLEL, help="shard the fast engine's model over K ranks (default 1)")
    replicas: int = option(1, group=PARALLEL, help="K independent engines, each batch split between them (default 1)")
    max_num_seqs: list[int] = option(factory=lambda: [8], group=CONTINUOUS,
                                     help="running-batch limit (slots of the KV cache): 8, 1,2,4 or pow2:1:256")
    arrival: str = option("", group=CONTINUOUS, help="open loop: poisson:RATE requests/s, or poisson:R1,R2,... to sweep")
    concurrency: list[int] = option(factory=list, group=CONTINUOUS,
                                    help="closed loop: N clients, each sending its next request when its last "
                                         "one ends, or a list to sweep")
    num_requests: int = option(64, group=CONTINUOUS,
                               help="requests per repeat, the same seeded workload at every point (default 64)")
    max_num_batched_tokens: int = option(2048, group=CONTINUOUS,
                                         help="per-step token budget (prefill chunk tokens + one per decoding "
                                              "row); longer prompts prefill in chunks (default 2048)")
    kv_cache_tokens: int = option(0, group=CONTINUOUS,
                                  help="cap on KV tokens reserved by admitted requests (prompt + output) "
                                       "(default 0: the whole slot cache, which never binds)")
    slo_metric: str = option("ttft", group=CONTINUOUS,
                             help="goodput SLO metric: ttft (default), itl (the request's mean gap) or e2e")
    slo_ms: float = option(1000.0, group=CONTINUOUS,
                           help="goodput SLO limit in ms: a request meets it when its metric is at most this "
                                "(default 1000)")
    refine_points: int = option(0, group=REFINE,
                                help="at most this many added points (default 0: none): first between the "
                                     "largest value meeting --refine-slo and the next, which breaks it, then "
                                     "between the value before the throughput plateau and its start")
    refine_slo: str = option("", group=REFINE,
                             help="the latency SLO whose limit to bracket, METRIC:PERCENTILE:MS (ttft, itl or "
                                  "e2e; 50, 95 or 99), e.g. ttft:95:1000; without it only the plateau is refined")
    refine_tolerance: float = option(0.05, group=REFINE,
                                     help="a bracket is done when its upper end is within this share of its "
                                          "lower end (default 0.05); whole-number axes stop at neighbours")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def request_lengths(self, size: int, repeat: int) -> tuple[list[int], list[int]]:
        """The prompt and output lengths of `size` requests; the same for the same seed, size and repeat."""
        prompt = distributions.parse(self.prompt_len)
        output = distributions.parse(self.output_len)
        key = f"{self.seed}:{size}:{repeat}"
        return (prompt.sample(size, random.Random(f"prompt:{key}")),
                output.sample(size, random.Random(f"output:{key}")))

    def repeat_indices(self) -> range:
        """Warm-up repeats are numbered below zero so they never share lengths with measured ones."""
        return range(-self.warmup, self.repeats)

    def longest_request(self, size: int) -> int:
        """The most KV tokens (prompt + output) a request of any repeat of `size` requests holds."""
        longest = 0
        for repeat in self.repeat_indices():
            prompts, outputs = self.request_lengths(size, repeat)
            longest = max(longest, max(p + o for p, o in zip(prompts, outputs)))
        return longest


def model_context(model: str) -> int:
    """Maximum sequence length of a preset or a local checkpoint (read from config.json)."""
    if model in PRESETS:
        return int(PRESETS[model]["max_position_embeddings"])
    config = json.loads((Path(model) / "config.json").read_text())
    return int(config.get("max_position_embeddings") or config.get("max_seq_len") or 2048)


def check_context(longest: int, context: int | None) -> None:
    """Every request's prompt + output must fit the model's context."""
    if context and longest > context:
        raise SpecError("prompt_len", f"prompt + output reaches {longest} tokens, over the model's "
                                      f"context of {context}")
