"""Numbered schema migrations for the history DB. Append new ones; never edit one that has shipped."""
from __future__ import annotations

import duckdb

from runners.results.contract import utc_now

_SUMMARY_COLUMNS = """
    point_index INTEGER NOT NULL, batch_size INTEGER, status VARCHAR, error VARCHAR,
    repeats INTEGER, warmup INTEGER, prompt_len_mean DOUBLE, output_len_mean DOUBLE,
    prefill_ms DOUBLE, decode_step_ms DOUBLE, decode_step_ms_p95 DOUBLE,
    ttft_ms_p50 DOUBLE, ttft_ms_p95 DOUBLE, ttft_ms_p99 DOUBLE,
    itl_ms_p50 DOUBLE, itl_ms_p95 DOUBLE, itl_ms_p99 DOUBLE,
    e2e_ms_p50 DOUBLE, e2e_ms_p95 DOUBLE, e2e_ms_p99 DOUBLE,
    output_tokens_per_s DOUBLE, output_tokens_per_s_min DOUBLE, output_tokens_per_s_max DOUBLE,
    input_tokens_per_s DOUBLE, prefill_tokens_per_s DOUBLE, requests_per_s DOUBLE,
    prefill_padding_waste DOUBLE, decode_padding_waste DOUBLE,
    active_seqs_mean DOUBLE, active_tokens_mean DOUBLE, active_tokens_max DOUBLE, setup_ms DOUBLE,
    mem_capacity BIGINT, mem_weights BIGINT, mem_kv_allocated BIGINT, mem_kv_used BIGINT,
    mem_activations BIGINT, mem_allocator_reserve BIGINT, mem_other BIGINT,
    mem_peak_allocated BIGINT, mem_reserved BIGINT, mem_nvml_used BIGINT,
    gpu_util_pct DOUBLE, mem_ctrl_util_pct DOUBLE, sm_util_pct DOUBLE, sm_occupancy_pct DOUBLE,
    tensor_active_pct DOUBLE, dram_bw_util_pct DOUBLE, power_w DOUBLE, sm_clock_mhz DOUBLE,
    cpu_pct DOUBLE, rss_bytes_max BIGINT,
    gpu_util_pct_decode DOUBLE, mem_ctrl_util_pct_decode DOUBLE, sm_util_pct_decode DOUBLE,
    sm_occupancy_pct_decode DOUBLE, tensor_active_pct_decode DOUBLE, dram_bw_util_pct_decode DOUBLE,
    energy_j DOUBLE, energy_per_output_token_j DOUBLE, timing VARCHAR, util_source VARCHAR
"""

_V1_INITIAL = [
    """CREATE TABLE runs (
        run_id VARCHAR PRIMARY KEY, name VARCHAR, folder VARCHAR,
        state VARCHAR, error VARCHAR, stopped_early VARCHAR, pid INTEGER,
        points_done INTEGER, points_total INTEGER,
        created_at TIMESTAMP, started_at TIMESTAMP, heartbeat_at TIMESTAMP, finished_at TIMESTAMP,
        model VARCHAR, dtype VARCHAR, engine VARCHAR, mode VARCHAR, device VARCHAR,
        gpu_name VARCHAR, gpu_memory_bytes BIGINT, driver VARCHAR, cuda VARCHAR,
        torch_version VARCHAR, transformers_version VARCHAR, python_version VARCHAR,
        host VARCHAR, engine_version VARCHAR, fingerprint VARCHAR,
        spec_json VARCHAR, status_json VARCHAR, env_json VARCHAR, model_json VARCHAR,
        calibration_json VARCHAR, imported_at TIMESTAMP
    )""",
    f"CREATE TABLE points (run_id VARCHAR NOT NULL, {_SUMMARY_COLUMNS}, PRIMARY KEY (run_id, point_index))",
    """CREATE TABLE repeats (
        run_id VARCHAR NOT NULL, point_index INTEGER NOT NULL, repeat INTEGER, batch_size INTEGER,
        wall_ms DOUBLE, prefill_ms DOUBLE, decode_ms DOUBLE, output_tokens BIGINT, input_tokens BIGINT,
        output_tokens_per_s DOUBLE, input_tokens_per_s DOUBLE, requests_per_s DOUBLE
    )""",
    """CREATE TABLE requests (
        run_id VARCHAR NOT NULL, point_index INTEGER NOT NULL, repeat INTEGER, request_index INTEGER,
        batch_size INTEGER, prompt_len INTEGER, output_len INTEGER, queue_ms DOUBLE, ttft_ms DOUBLE,
        e2e_ms DOUBLE, itl_ms_mean DOUBLE, itl_ms_p95 DOUBLE
    )""",
    """CREATE TABLE steps (
        run_id VARCHAR NOT NULL, point_index INTEGER NOT NULL, repeat INTEGER, step_index INTEGER,
        phase VARCHAR, start_ms DOUBLE, duration_ms DOUBLE, active_seqs INTEGER, active_tokens BIGINT,
        batch_rows INTEGER
    )""",
    """CREATE TABLE samples (
        run_id VARCHAR NOT NULL, t_s DOUBLE, point_index INTEGER, repeat INTEGER, phase VARCHAR,
        gpu_util_pct DOUBLE, mem_ctrl_util_pct DOUBLE, mem_used_bytes BIGINT, power_w DOUBLE,
        sm_clock_mhz DOUBLE, sm_util_pct DOUBLE, sm_occupancy_pct DOUBLE, tensor_active_pct DOUBLE,
        dram_bw_util_pct DOUBLE, cpu_pct DOUBLE, rss_bytes BIGINT, source VARCHAR
    )""",
    """CREATE TABLE calibrations (
        key VARCHAR PRIMARY KEY, device VARCHAR, dtype VARCHAR, copy_bytes_per_s DOUBLE,
        matmul_flops_per_s DOUBLE, source VARCHAR, run_id VARCHAR, data_json VARCHAR,
        updated_at TIMESTAMP
    )""",
    "CREATE INDEX repeats_run_point ON repeats (run_id, point_index)",
    "CREATE INDEX requests_run_point ON requests (run_id, point_index)",
    "CREATE INDEX steps_run_point ON steps (run_id, point_index)",
    "CREATE INDEX samples_run_point ON samples (run_id, point_index)",
]

_V2_DEMO_FLAG = [
    "ALTER TABLE runs ADD COLUMN demo BOOLEAN DEFAULT false",
    "UPDATE runs SET demo = false WHERE demo IS NULL",
]

_V3_SETTINGS = [
    "CREATE TABLE settings (key VARCHAR PRIMARY KEY, value VARCHAR, updated_at TIMESTAMP)",
]

_V4_CONTINUOUS = [  # continuous-batching points (runners/results/schemas.py CONTINUOUS_SUMMARY) and step token mix
    f"ALTER TABLE points ADD COLUMN {name} {kind}" for name, kind in (
        ("sweep_axis", "VARCHAR"), ("sweep_value", "DOUBLE"), ("max_num_seqs", "INTEGER"),
        ("arrival_rate", "DOUBLE"), ("concurrency", "INTEGER"), ("queue_ms_p50", "DOUBLE"),
        ("queue_ms_p95", "DOUBLE"), ("queue_ms_p99", "DOUBLE"), ("goodput_rps", "DOUBLE"),
        ("goodput_slo", "VARCHAR"), ("kv_capacity_tokens", "BIGINT"), ("kv_occupancy_mean", "DOUBLE"),
        ("kv_occupancy_max", "DOUBLE"), ("admission_waits", "BIGINT"))
] + [
    "ALTER TABLE steps ADD COLUMN prefill_tokens BIGINT",
    "ALTER TABLE steps ADD COLUMN decode_tokens BIGINT",
]

_V5_PARALLEL = [  # tensor-parallel and replicated points (runners/results/schemas.py PARALLEL_SUMMARY), per-GPU samples
    f"ALTER TABLE points ADD COLUMN {name} {kind}" for name, kind in (
        ("tensor_parallel", "INTEGER"), ("replicas", "INTEGER"), ("comm_ms_per_step", "DOUBLE"),
        ("comm_share", "DOUBLE"), ("comm_source", "VARCHAR"))
] + [
    "ALTER TABLE requests ADD COLUMN replica INTEGER",
    "ALTER TABLE steps ADD COLUMN replica INTEGER",
    "ALTER TABLE samples ADD COLUMN gpu_index INTEGER",
]

_V6_OUTLIER_STEPS = [  # measured steps over 5× the median of their peers (runners/metrics/outliers.py)
    "ALTER TABLE points ADD COLUMN outlier_steps BIGINT",
]

_V7_TRUST = [  # trust checks' telemetry and refinement's mark (runners/results/schemas.py TRUST_SUMMARY, docs/trust.md)
    f"ALTER TABLE points ADD COLUMN {name} {kind}" for name, kind in (
        ("sm_clock_mhz_min", "DOUBLE"), ("sm_clock_mhz_max", "DOUBLE"), ("clock_reasons", "VARCHAR"),
        ("gpu_processes_max", "INTEGER"), ("added_for", "VARCHAR"))
] + [
    "ALTER TABLE requests ADD COLUMN generated_len INTEGER",
    "ALTER TABLE samples ADD COLUMN clock_reasons BIGINT",
    "ALTER TABLE samples ADD COLUMN gpu_processes INTEGER",
]

_V8_PAGED_KV = [  # the continuous engine's block pool: preemptions and blocks (runners/results/schemas.py)
    f"ALTER TABLE points ADD COLUMN {name} {kind}" for name, kind in (
        ("preemptions", "BIGINT"), ("kv_block_size", "INTEGER"), ("kv_blocks_total", "BIGINT"),
        ("kv_blocks_peak", "BIGINT"))
] + [
    "ALTER TABLE steps ADD COLUMN kv_blocks BIGINT",
    "ALTER TABLE steps ADD COLUMN preemptions INTEGER",
]

_V9_TEAM = [  # issue 33: who owns each run (existing rows: the local user, demo runs: "demo"), and the audit trail
    "ALTER TABLE runs ADD COLUMN owner VARCHAR",
    "UPDATE runs SET owner = CASE WHEN demo THEN 'demo' ELSE 'local' END WHERE owner IS NULL",
    """CREATE TABLE audit (
        occurred_at TIMESTAMP NOT NULL, actor VARCHAR NOT NULL, action VARCHAR NOT NULL, run_id VARCHAR, detail VARCHAR
    )""",
]

_V10_MEASURED = [  # measuring until known (runners/results/schemas.py MEASURE_SUMMARY, docs/trust.md)
    f"ALTER TABLE points ADD COLUMN {name} {kind}" for name, kind in (
        ("draws", "INTEGER"), ("replays", "INTEGER"), ("requests", "BIGINT"), ("tokens_per_s_interval", "DOUBLE"),
        ("interval_method", "VARCHAR"), ("target_interval", "DOUBLE"), ("budget_spent", "VARCHAR"),
        ("replay_spread", "DOUBLE"), ("prediction_error_max", "DOUBLE"))
] + [f"ALTER TABLE repeats ADD COLUMN {name} {kind}" for name, kind in (
    ("draw", "INTEGER"), ("replay", "INTEGER"), ("predicted_tokens_per_s", "DOUBLE"))]

_V11_QUANT_ERROR = [  # a quantised run's per-product error against bfloat16 (runners/results/schemas.py QUANT_ERROR)
    """CREATE TABLE quant_errors (
        run_id VARCHAR NOT NULL, rows INTEGER, kernel VARCHAR, layer INTEGER, matrix VARCHAR, rel_error DOUBLE
    )""",
    "CREATE INDEX quant_errors_run ON quant_errors (run_id)",
]

_V12_TTFT_PARTS = [  # an endpoint request's TTFT part by part (runners/results/schemas.py TTFT_PARTS, ENDPOINT_SUMMARY)
    f"ALTER TABLE requests ADD COLUMN {part} DOUBLE" for part in (
        "ttft_client_ms", "ttft_uplink_ms", "ttft_parse_ms", "ttft_step_wait_ms", "ttft_queue_ms",
        "ttft_prefill_ms", "ttft_flush_ms", "ttft_downlink_ms")
] + [f"ALTER TABLE points ADD COLUMN {name} DOUBLE" for name in (
    "ttft_client_ms_p50", "ttft_uplink_ms_p50", "ttft_parse_ms_p50", "ttft_step_wait_ms_p50", "ttft_queue_ms_p50",
    "ttft_prefill_ms_p50", "ttft_flush_ms_p50", "ttft_downlink_ms_p50", "clock_error_ms")]

_V13_LOADED = [  # a continuous or endpoint repeat's load window (runners/metrics/loaded.py)
    "ALTER TABLE repeats ADD COLUMN loaded_start_ms DOUBLE",
    "ALTER TABLE repeats ADD COLUMN loaded_end_ms DOUBLE",
    "ALTER TABLE repeats ADD COLUMN loaded_output_tokens BIGINT",
]

_V14_LATENCY_BASIS = [  # which requests a point's latency percentiles count (runners/metrics/loaded.py counts)
    "ALTER TABLE requests ADD COLUMN arrival_ms DOUBLE",
    "ALTER TABLE requests ADD COLUMN latency_counted BOOLEAN",
    "ALTER TABLE points ADD COLUMN latency_requests BIGINT",
]

# MIGRATIONS[n - 1] takes the schema from version n - 1 to version n.
MIGRATIONS: list[list[str]] = [_V1_INITIAL, _V2_DEMO_FLAG, _V3_SETTINGS, _V4_CONTINUOUS, _V5_PARALLEL,
                               _V6_OUTLIER_STEPS, _V7_TRUST, _V8_PAGED_KV, _V9_TEAM, _V10_MEASURED,
                               _V11_QUANT_ERROR, _V12_TTFT_PARTS, _V13_LOADED,
                               _V14_LATENCY_BASIS]
CURRENT_VERSION = len(MIGRATIONS)


class SchemaTooNewError(RuntimeError):
    """The DB was written by a newer BatchScope; opening it with this one could corrupt it."""


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """The version the DB is at; 0 for an empty file."""
    has_table = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
    ).fetchone()[0]
    if not has_table:
        return 0
    return con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]


def migrate(con: duckdb.DuckDBPyConnection, target: int = CURRENT_VERSION) -> list[int]:
    """Apply every migration after the DB's version up to `target`, each in its own transaction."""
    con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP)")
    current = schema_version(con)
    if current > CURRENT_VERSION:
        raise SchemaTooNewError(f"schema version {current}; this one knows up to {CURRENT_VERSION}")
    applied = []
    for version in range(current + 1, target + 1):
        con.execute("BEGIN TRANSACTION")
        try:
            for statement in MIGRATIONS[version - 1]:
                con.execute(statement)
            con.execute("INSERT INTO schema_version VALUES (?, ?)", [version, utc_now()])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        applied.append(version)
    return applied
