"""Arrow schemas of the point files (docs/run-folder.md), so null-only columns keep their types."""
from __future__ import annotations

import pyarrow as pa

F, I, I64, S = pa.float64(), pa.int32(), pa.int64(), pa.string()

PERCENTILES = (50, 95, 99)
MEMORY_PARTS = ("mem_capacity", "mem_weights", "mem_kv_allocated", "mem_kv_used", "mem_activations",
                "mem_allocator_reserve", "mem_other", "mem_peak_allocated", "mem_reserved", "mem_nvml_used")
UTIL_MEANS = ("gpu_util_pct", "mem_ctrl_util_pct", "sm_util_pct", "sm_occupancy_pct", "tensor_active_pct",
              "dram_bw_util_pct", "power_w", "sm_clock_mhz")

# continuous mode only (null for static points); docs/run-folder.md says what each means
CONTINUOUS_SUMMARY = (
    [("sweep_axis", S), ("sweep_value", F), ("max_num_seqs", I), ("arrival_rate", F), ("concurrency", I)]
    + [(f"queue_ms_p{p}", F) for p in PERCENTILES]
    + [("goodput_rps", F), ("goodput_slo", S), ("kv_capacity_tokens", I64), ("kv_occupancy_mean", F),
       ("kv_occupancy_max", F), ("admission_waits", I64), ("preemptions", I64), ("kv_block_size", I),
       ("kv_blocks_total", I64), ("kv_blocks_peak", I64)]
)

# several processes (docs/run-folder.md): the ranks' layout and tensor-parallel communication
PARALLEL_SUMMARY = [("tensor_parallel", I), ("replicas", I), ("comm_ms_per_step", F), ("comm_share", F),
                    ("comm_source", S)]

# what a tuner needs to trust a point (docs/trust.md) and whether refinement added it (docs/run-folder.md)
TRUST_SUMMARY = [("sm_clock_mhz_min", F), ("sm_clock_mhz_max", F), ("clock_reasons", S), ("gpu_processes_max", I),
                 ("added_for", S)]

# how a point was measured until known (docs/trust.md): draws, replays, the interval and how it was found
MEASURE_SUMMARY = [("draws", I), ("replays", I), ("requests", I64), ("latency_requests", I64),
                   ("tokens_per_s_interval", F), ("interval_method", S), ("target_interval", F), ("budget_spent", S),
                   ("replay_spread", F), ("prediction_error_max", F)]

# an endpoint request's TTFT in the parts its timestamps split it into (docs/run-folder.md says where each
# starts and ends; runners.metrics.endpoint computes them); null where the server sends no times
TTFT_PARTS = ("ttft_client_ms", "ttft_uplink_ms", "ttft_parse_ms", "ttft_step_wait_ms", "ttft_queue_ms",
              "ttft_prefill_ms", "ttft_flush_ms", "ttft_downlink_ms")
ENDPOINT_SUMMARY = [(f"{part}_p50", F) for part in TTFT_PARTS] + [("clock_error_ms", F)]

SUMMARY = pa.schema(
    [("point_index", I), ("batch_size", I), ("status", S), ("error", S), ("repeats", I), ("warmup", I),
     ("prompt_len_mean", F), ("output_len_mean", F), ("prefill_ms", F), ("decode_step_ms", F),
     ("decode_step_ms_p95", F)]
    + [(f"{m}_ms_p{p}", F) for m in ("ttft", "itl", "e2e") for p in PERCENTILES]
    + [("output_tokens_per_s", F), ("output_tokens_per_s_min", F), ("output_tokens_per_s_max", F),
       ("input_tokens_per_s", F), ("prefill_tokens_per_s", F), ("requests_per_s", F),
       ("prefill_padding_waste", F), ("decode_padding_waste", F), ("active_seqs_mean", F),
       ("active_tokens_mean", F), ("active_tokens_max", F), ("setup_ms", F), ("outlier_steps", I64)]
    + [(name, I64) for name in MEMORY_PARTS]
    + [(name, F) for name in UTIL_MEANS]
    + [(f"{name}_decode", F) for name in UTIL_MEANS[:6]]
    + [("cpu_pct", F), ("rss_bytes_max", I64), ("energy_j", F), ("energy_per_output_token_j", F),
       ("timing", S), ("util_source", S)]
    + CONTINUOUS_SUMMARY
    + PARALLEL_SUMMARY
    + TRUST_SUMMARY
    + MEASURE_SUMMARY
    + ENDPOINT_SUMMARY
)

# quant_error.parquet, one per quantised run (runners/engines/quant_error.py, docs/quantisation.md): each decoder
# matrix product's relative error against bfloat16 per kernel path
QUANT_ERROR = pa.schema([("rows", I), ("kernel", S), ("layer", I), ("matrix", S), ("rel_error", F)])

DETAIL = {
    "repeats": pa.schema([("point_index", I), ("repeat", I), ("batch_size", I), ("wall_ms", F),
                          ("prefill_ms", F), ("decode_ms", F), ("output_tokens", I64), ("input_tokens", I64),
                          ("output_tokens_per_s", F), ("input_tokens_per_s", F), ("requests_per_s", F),
                          ("draw", I), ("replay", I), ("predicted_tokens_per_s", F),
                          ("loaded_start_ms", F), ("loaded_end_ms", F), ("loaded_output_tokens", I64)]),
    "requests": pa.schema([("point_index", I), ("repeat", I), ("request_index", I), ("batch_size", I),
                           ("prompt_len", I), ("output_len", I), ("queue_ms", F), ("ttft_ms", F),
                           ("e2e_ms", F), ("itl_ms_mean", F), ("itl_ms_p95", F), ("replica", I),
                           ("generated_len", I)] + [(part, F) for part in TTFT_PARTS]
                          + [("arrival_ms", F), ("latency_counted", pa.bool_())]),
    "steps": pa.schema([("point_index", I), ("repeat", I), ("step_index", I), ("phase", S),
                        ("start_ms", F), ("duration_ms", F), ("active_seqs", I), ("active_tokens", I64),
                        ("batch_rows", I), ("prefill_tokens", I64), ("decode_tokens", I64), ("replica", I),
                        ("kv_blocks", I64), ("preemptions", I)]),
    "samples": pa.schema([("t_s", F), ("point_index", I), ("repeat", I), ("phase", S),
                          ("gpu_util_pct", F), ("mem_ctrl_util_pct", F), ("mem_used_bytes", I64),
                          ("power_w", F), ("sm_clock_mhz", F), ("sm_util_pct", F), ("sm_occupancy_pct", F),
                          ("tensor_active_pct", F), ("dram_bw_util_pct", F), ("cpu_pct", F),
                          ("rss_bytes", I64), ("source", S), ("gpu_index", I), ("clock_reasons", I64),
                          ("gpu_processes", I)]),
}
