"""The sweep spec: every option of a sweep, declared once with its help, defaults and request lengths.

Torch-free on purpose, so the New sweep page flags the same errors next to each field that the runner
would reject with exit code 2. The per-mode checks and points live beside this module (static,
continuous, parallel); device checks (can this GPU run bfloat16?) live in `runners.engines.devices`.
"""
from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from runners.engines.presets import PRESETS
from runners.engines.quant_layout import QUANT_DTYPES
from runners.spec.options import MAX_BATCH_SIZE, FieldInfo, SpecError, option
from runners.spec.registry import (DEFAULT_MODE, ENGINES, MODES, is_load_driven, measures_a_server, modes_that,
                                   sweeps_batch_size)
from runners.spec.slo import MAX_LATENCY_MS, SLO_METRICS
from runners.workload import distributions

DTYPES = ("float32", "bfloat16", "float16", *QUANT_DTYPES)
DTYPE_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # as run names write them; others as is
ON_OOM = ("stop", "continue")
APIS = ("auto", "completions", "chat")
PROMPT_FORMATS = ("auto", "ids", "text")
# the modes an option applies to
STATIC, LOADED, SERVED = modes_that(sweeps_batch_size), modes_that(is_load_driven), modes_that(measures_a_server)
DEFAULT_MAX_BATCH_SIZE = 4096
MAX_SEED = 2**32 - 1  # torch generators take seed × 1_000_003 + … (runners.workload.workload): 64-bit safe up to here
MAX_REQUESTS = 100_000  # requests a sweep may draw, warm-up included (check_draws)
MIN_TELEMETRY_HZ = 20.0  # docs/design.md §2: utilisation is sampled at ≥ 20 Hz
MAX_RANKS = 64  # processes one sweep may run (tensor-parallel ranks or replicas)
MAX_TOKENS = 1_000_000_000  # a step's token budget or a KV cache cap: past any GPU's memory
MAX_WAIT_S = 604_800.0  # a request or a server start: a week
MAX_REFINE_POINTS = 100
PARALLEL = "several processes (static mode; one rank per GPU, on CPU processes sharing the host)"
CONTINUOUS = "continuous mode (one of --max-num-seqs, --arrival, --concurrency may list values to sweep)"
ENDPOINT = ("endpoint engine (--engine endpoint: requests go to a running OpenAI-compatible server, with the load "
            "options above; --model names the shapes it serves, for prompt ids and the roofline)")
MEASURE = ("measuring until known (each point runs --repeats draws of its requests and --replays of the first, "
           "then draws more until its throughput's interval is within --target-interval or a budget is spent)")
REFINE = "refinement (points the runner adds after the planned ones, along the sweep's axis)"


@dataclass
class SweepSpec:
    """Every option of a sweep: each field's `option` says its label, help, bounds, choices and modes once, for
    the CLI (runners.cli), the New sweep form (batchscope.ui) and validation (runners.spec.validate)."""

    model: str = option(label="Model", memory=True, help=f"preset ({', '.join(PRESETS)}) or a local HF checkpoint dir")
    dtype: str = option("bfloat16", label="dtype", memory=True, choices=DTYPES,
                        help="float32, bfloat16, float16, or with --engine fast: fp8, fp8-dynamic, int8 (quantised "
                             "weights, bfloat16 activations and KV cache)")
    quantize_lm_head: bool = option(False, label="Quantise lm_head too", memory=True,
                                    help="with fp8, fp8-dynamic or int8: quantise the output head (lm_head) as well, "
                                         "its error recorded beside the layers' (default: it stays bfloat16, as in "
                                         "vLLM; gpt-fast and torchao quantise it)")
    engine: str = option("hf-generate", label="Engine", memory=True, choices=ENGINES,
                         help="hf-generate, fast, or endpoint (a running server; options below)")
    mode: str = option(DEFAULT_MODE, label="Batching mode", memory=True, choices=MODES,
                       help="static (default) or continuous (fast engine; options below); endpoint (the endpoint "
                            "engine's, its default)")
    batch_sizes: list[int] = option(factory=lambda: [1, 2, 4, 8], label="Batch sizes", memory=True, modes=STATIC,
                                    most=MAX_BATCH_SIZE, help="1,2,4 or pow2:1:256")
    prompt_len: str = option("fixed:128", label="Prompt length", memory=True, help=distributions.SYNTAX)
    output_len: str = option("fixed:32", label="Output length", memory=True, help="same syntax as --prompt-len")
    repeats: int = option(3, label="Repeats", memory=True, least=1, most=1000,
                          help="measured repeats per point (default 3)")
    warmup: int = option(1, label="Warm-up", memory=True, least=0, most=100,
                         help="warm-up repeats per point (default 1)")
    seed: int = option(0, label="Seed", memory=True, least=0, most=MAX_SEED,
                       help="seeds the request lengths, prompt ids, arrivals and random weights")
    device: str = option("auto", label="Device", help="auto, cpu, cuda or cuda:N")
    max_batch_size: int = option(DEFAULT_MAX_BATCH_SIZE, label="Largest batch size allowed", modes=STATIC, least=1,
                                 most=MAX_BATCH_SIZE,
                                 help=f"ceiling on batch sizes (default 4096, at most {MAX_BATCH_SIZE})")
    on_oom: str = option("stop", label="After an out-of-memory point", choices=ON_OOM,
                         help="stop (default: larger batches are not tried) or continue (every batch is tried)")
    telemetry_hz: float = option(MIN_TELEMETRY_HZ, label="Utilisation samples per second", least=MIN_TELEMETRY_HZ,
                                 most=1000.0, help="utilisation samples per second (20 to 1000)")
    calibrate: bool = option(True, label="Calibrate the device first",
                             help="measure the device's copy bandwidth and matmul rate before the points")
    name: str = option("", label="Run name (optional)", longest=200, help="a label for the run")
    tensor_parallel: int = option(1, label="Tensor-parallel ranks", modes=STATIC, group=PARALLEL, least=1,
                                  most=MAX_RANKS, help="shard the fast engine's model over K ranks (default 1)")
    replicas: int = option(1, label="Replicas", modes=STATIC, group=PARALLEL, least=1, most=MAX_RANKS,
                           help="K independent engines, each batch split between them (default 1)")
    max_num_seqs: list[int] = option(factory=lambda: [8], label="max_num_seqs", memory=True, modes=LOADED,
                                     group=CONTINUOUS, most=MAX_BATCH_SIZE,
                                     help="running-batch limit (slots of the KV cache): 8, 1,2,4 or pow2:1:256")
    arrival: str = option("", label="Arrival rate", memory=True, modes=LOADED, group=CONTINUOUS,
                          help="open loop: poisson:RATE requests/s, or poisson:R1,R2,... to sweep")
    concurrency: list[int] = option(factory=list, label="Concurrent clients", memory=True, modes=LOADED,
                                    group=CONTINUOUS, most=MAX_BATCH_SIZE,
                                    help="closed loop: N clients, each sending its next request when its last "
                                         "one ends, or a list to sweep")
    think_ms: float = option(0.0, label="Client think time (ms)", modes=LOADED, group=CONTINUOUS, least=0,
                             most=MAX_LATENCY_MS,
                             help="closed loop: each client waits this long after its last request ends before "
                                  "sending its next (default 0: at once)")
    num_requests: int = option(64, label="Requests per repeat", memory=True, modes=LOADED, group=CONTINUOUS, least=1,
                               most=MAX_REQUESTS,
                               help="requests per repeat, the same seeded workload at every point (default 64)")
    requests_per_client: int = option(0, label="Requests per client", modes=LOADED, group=CONTINUOUS, least=0,
                                      most=MAX_REQUESTS,
                                      help="closed loop: each point serves this many requests per client, the first "
                                           "of the num_requests workload, so a sweep from 1 to 512 clients does not "
                                           "serve 512 requests one at a time (default 0: num_requests at every "
                                           "point)")
    max_num_batched_tokens: int = option(2048, label="Token budget per step", modes=LOADED, group=CONTINUOUS,
                                         least=1, most=MAX_TOKENS,
                                         help="per-step token budget (prefill chunk tokens + one per decoding "
                                              "row); longer prompts prefill in chunks (default 2048)")
    kv_cache_tokens: int = option(0, label="KV cache tokens", modes=("continuous",), group=CONTINUOUS, least=0,
                                  most=MAX_TOKENS,
                                  help="KV tokens the block pool holds (default 0: what --gpu-memory-utilization "
                                       "leaves on a GPU, every slot at the longest request on CPU)")
    gpu_memory_utilization: float = option(0.9, label="GPU memory utilisation", modes=("continuous",),
                                           group=CONTINUOUS, least=0.1, most=0.98,
                                           help="share of the GPU's memory the engine may fill: weights, "
                                                "activations and the KV block pool (0.1 to 0.98; default 0.9, "
                                                "as vLLM)")
    slo_metric: str = option("ttft", label="Goodput SLO metric", choices=SLO_METRICS, modes=LOADED, group=CONTINUOUS,
                             help="goodput SLO metric: ttft (default), itl (the request's mean gap) or e2e")
    slo_ms: float = option(1000.0, label="Goodput SLO limit (ms)", modes=LOADED, group=CONTINUOUS, above=0,
                           most=MAX_LATENCY_MS,
                           help="goodput SLO limit in ms: a request meets it when its metric is at most this "
                                "(default 1000)")
    url: str = option("http://127.0.0.1:8000/v1", label="Base URL", modes=SERVED, group=ENDPOINT,
                      help="the server's OpenAI-compatible base URL")
    model_name: str = option("", label="Served model name", modes=SERVED, group=ENDPOINT,
                             help="the model to ask the server for, as /v1/models lists it (default: its first)")
    api_key_env: str = option("", label="API key variable", modes=SERVED, group=ENDPOINT,
                              help="an environment variable holding the API key, sent as a bearer token (the "
                                   "key is never stored)")
    server_labels: str = option("", label="Server labels", modes=SERVED, group=ENDPOINT,
                                help="the server's own knobs and version as you know them, recorded with the run: "
                                     "'vllm 0.11, max_num_seqs=256'")
    server_command: str = option("", label="Restart command per point (optional)", modes=SERVED, group=ENDPOINT,
                                 help="restart this server before each point and wait until it answers: split "
                                      "like a shell line, never run by a shell; {max_num_seqs} and "
                                      "{max_num_batched_tokens} become the point's values, so --max-num-seqs "
                                      "may list values to sweep")
    api: str = option("auto", label="API", choices=APIS, modes=SERVED, group=ENDPOINT,
                      help="completions, chat (each prompt's words as one user message; the server's usage "
                           "counts its chat template too) or auto (completions where the server takes it, else "
                           "chat)")
    prompt_format: str = option("auto", label="Prompt format", choices=PROMPT_FORMATS, modes=SERVED, group=ENDPOINT,
                                help="auto (token ids where the server takes them, else text), ids or text; "
                                     "chat takes text")
    request_timeout_s: float = option(600.0, label="Request timeout (s)", modes=SERVED, group=ENDPOINT, above=0,
                                      most=MAX_WAIT_S,
                                      help="a request still unfinished after this many seconds fails (default 600)")
    ready_timeout_s: float = option(600.0, label="Server start timeout (s)", modes=SERVED, group=ENDPOINT, above=0,
                                    most=MAX_WAIT_S,
                                    help="how long a (re)started server may take to answer (default 600)")
    target_interval: float = option(0.05, label="Target interval (share of throughput)", group=MEASURE, least=0,
                                    most=0.99,
                                    help="half-width of the interval (95 percent confidence) a point's throughput is "
                                         "measured to, as a share of it (default 0.05: ±5 percent); 0 runs "
                                         "--repeats draws and stops")
    replays: int = option(1, label="Replays", memory=True, group=MEASURE, least=0, most=100,
                          help="times the first draw's requests run again, so measurement noise (the same "
                               "requests) is read apart from workload variance (new draws) (default 1)")
    max_draws: int = option(6, label="Most measured runs per point", memory=True, group=MEASURE, least=1, most=1000,
                            help="measured runs per point at most, draws and replays together (default 6: "
                                 "twice 3 repeats, so a sweep costs at most twice a 3-repeat one)")
    point_budget_s: float = option(300.0, label="Time budget per point (s)", group=MEASURE, above=0, most=MAX_WAIT_S,
                                   help="a point draws no more once its measured runs took this many seconds "
                                        "(default 300)")
    refine_points: int = option(0, label="Points to add by refinement", group=REFINE, least=0,
                                most=MAX_REFINE_POINTS,
                                help="at most this many added points (default 0: none): first between the "
                                     "SLO limit of --refine-slo (the largest value meeting it; the smallest where "
                                     "latency falls along the axis) and its neighbour, which breaks it, then "
                                     "between the value before the throughput plateau and its start")
    refine_slo: str = option("", label="Refinement SLO", group=REFINE,
                             help="the latency SLO whose limit to bracket, METRIC:PERCENTILE:MS (ttft, itl or "
                                  "e2e; 50, 95 or 99), e.g. ttft:95:1000; without it only the plateau is refined")
    refine_tolerance: float = option(0.05, label="Refinement tolerance", group=REFINE, above=0, most=1.0,
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
        """Every draw a point may run: warm-up ones are numbered below zero so they never share lengths with
        measured ones, and measured ones go up to the most distinct draws the budget allows."""
        return range(-self.warmup, max(self.repeats, self.most_runs() - self.replays))

    def most_runs(self) -> int:
        """Measured runs a point may take: `max_draws`, but never fewer than the draws and replays it must run."""
        return max(self.max_draws, self.repeats + self.replays)

    def longest_request(self, size: int) -> int:
        """The most KV tokens (prompt + output) a request of any repeat of `size` requests holds."""
        longest = 0
        for repeat in self.repeat_indices():
            prompts, outputs = self.request_lengths(size, repeat)
            longest = max(longest, max(p + o for p, o in zip(prompts, outputs)))
        return longest


def spec_fields() -> list[FieldInfo]:
    """Every option of SweepSpec with its declaration, in order: the one list the CLI, the form, validation and
    "run this again" read, so a field declared on SweepSpec reaches them all."""
    return [FieldInfo.of(spec_field) for spec_field in fields(SweepSpec)]


def checkpoint_config(model: str) -> dict[str, Any]:
    """A preset's fields, or a local checkpoint's config.json; SpecError when that is not a JSON object."""
    if model in PRESETS:
        return PRESETS[model]
    file = Path(model) / "config.json"
    try:
        config = json.loads(file.read_text())
    except (OSError, ValueError) as err:
        raise SpecError("model", f"cannot read {file}: {err}") from None
    if not isinstance(config, dict):
        raise SpecError("model", f"{file} holds no JSON object")
    return config


def config_count(config: dict[str, Any], key: str, model: str) -> int:
    """A positive whole number of a model's config (heads, sizes, context); SpecError naming it otherwise."""
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError("model", f"{model}: config {key} must be a positive whole number, got {value!r}")
    return value


def model_context(model: str) -> int:
    """Maximum sequence length of a preset or a local checkpoint (read from config.json)."""
    config = checkpoint_config(model)
    key = next((k for k in ("max_position_embeddings", "max_seq_len") if config.get(k)), None)
    return config_count(config, key, model) if key else 2048


def check_draws(spec: SweepSpec, per_repeat: int, name: str) -> None:
    """Validation, the New sweep preview and its memory estimate draw the lengths of every request of the
    sweep, warm-up repeats included: past MAX_REQUESTS that is a wait, so it is refused first."""
    repeats = len(spec.repeat_indices())
    if per_repeat * repeats > MAX_REQUESTS:
        raise SpecError(name, f"the sweep would draw {per_repeat * repeats:,} requests ({per_repeat:,} per repeat "
                              f"× {repeats} repeats with warm-up), over the limit of {MAX_REQUESTS:,}")


def lengths_fit(spec: SweepSpec, context: int) -> bool:
    """True when no request can pass `context` whatever is drawn (both length distributions have a maximum
    and the two fit), so the context check need not draw the sweep's requests."""
    prompt, output = (distributions.parse(text).upper_bound() for text in (spec.prompt_len, spec.output_len))
    return prompt is not None and output is not None and prompt + output <= context


def check_context(longest: int, context: int | None) -> None:
    """Every request's prompt + output must fit the model's context."""
    if context and longest > context:
        raise SpecError("prompt_len", f"prompt + output reaches {longest} tokens, over the model's "
                                      f"context of {context}")
