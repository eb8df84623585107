"""Roofline numbers hand-checked on a made-up model, plus the ridge batch solved from the model."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from batchscope.analysis import analyse, predicted_curve, ridge_batch
from batchscope.analysis.roofline import roofline_table, whole_cache_read_ms
from batchscope.report import analysed_run
from batchscope.store import Store
from runners.spec.refine import PLATEAU_GAIN
from tests.test_knee import make_points

# 1e9 params at 2 B each; attention 4 × layers × heads × head_dim = 4 × 10 × 10 × 100 = 4e4 FLOPs per cached token
MODEL = {"params": 1e9, "weight_bytes": 2e9, "kv_bytes_per_token": 1e5, "layers": 10, "heads": 10, "head_dim": 100}
CEILINGS = {"copy_bytes_per_s": 1e12, "matmul_flops_per_s": 1e15}


def point(batch: int, context: float, decode_ms: float, **extra) -> dict:
    row = {"batch_size": batch, "status": "ok", "active_seqs_mean": batch, "active_tokens_mean": batch * context,
           "decode_step_ms": decode_ms, "prompt_len_mean": context, "output_len_mean": 1.0,
           "prefill_padding_waste": 0.0, "prefill_ms": 1.0, "output_tokens_per_s": 1.0}
    return row | extra


def test_ridge_without_context_is_weight_time_over_row_compute() -> None:
    # W/BW = 2e9 / 1e12 = 2e-3 s; each row 2 × 1e9 / 1e15 = 2e-6 s → 2e-3 / 2e-6 = 1000
    assert ridge_batch(MODEL, CEILINGS, 0) == pytest.approx(1000)


def test_ridge_with_context() -> None:
    small_kv = MODEL | {"kv_bytes_per_token": 1e3}
    # c = 1000: row compute (2e9 + 4e4 × 1000) / 1e15 = 2.04e-6 s, row KV 1000 × 1e3 / 1e12 = 1e-6 s
    # B = 2e-3 / (2.04e-6 − 1e-6) = 1923.08
    assert ridge_batch(small_kv, CEILINGS, 1000) == pytest.approx(1923.0769, rel=1e-6)


def test_no_ridge_when_kv_outweighs_compute() -> None:
    # c = 1000 with 1e5 B/token: row KV 1e-4 s > row compute 2.04e-6 s → memory-bound at every batch
    assert ridge_batch(MODEL, CEILINGS, 1000) is None


def test_memory_bound_decode_point() -> None:
    table = roofline_table(pd.DataFrame([point(8, 1000, 3.5)]), MODEL, CEILINGS)
    row = table.iloc[0]
    # bytes 2e9 + 8000 × 1e5 = 2.8e9 → 2.8 ms; FLOPs 8 × (2e9 + 4e4 × 1000) = 1.632e10 → 0.01632 ms
    assert row["decode_bytes"] == pytest.approx(2.8e9)
    assert row["decode_flops"] == pytest.approx(1.632e10)
    assert row["predicted_step_ms"] == pytest.approx(2.8)
    assert row["bound"] == "memory"
    # 3.5 / 2.8 = 1.25 → 80 % of roofline
    assert row["step_ratio"] == pytest.approx(1.25)
    assert row["roofline_pct"] == pytest.approx(80.0)


def test_compute_bound_decode_point() -> None:
    table = roofline_table(pd.DataFrame([point(4096, 10, 10.0)]), MODEL, CEILINGS)
    row = table.iloc[0]
    # bytes 2e9 + 40960 × 1e5 = 6.096e9 → 6.096 ms; FLOPs 4096 × (2e9 + 4e5) = 8.1936384e12 → 8.1936 ms
    assert row["predicted_step_ms"] == pytest.approx(8.1936384)
    assert row["bound"] == "compute"


def test_static_batch_counts_finished_rows_in_flops_but_only_active_kv_in_bytes() -> None:
    # 8 rows computed, 4 still active holding 1000 tokens each: KV tokens 4000, context per active row 1000
    table = roofline_table(pd.DataFrame([point(8, 1000, 3.0, active_seqs_mean=4, active_tokens_mean=4000)]),
                           MODEL, CEILINGS)
    assert table.iloc[0]["decode_bytes"] == pytest.approx(2e9 + 4000 * 1e5)
    assert table.iloc[0]["decode_flops"] == pytest.approx(8 * (2e9 + 4e4 * 1000))


def test_prefill_counts_padding_and_causal_attention() -> None:
    row = point(8, 1000, 3.5, prompt_len_mean=900.0, prefill_padding_waste=0.1, prefill_ms=20.2)
    out = roofline_table(pd.DataFrame([row]), MODEL, CEILINGS).iloc[0]
    # padded length 900 / (1 − 0.1) = 1000; FLOPs 8 × (2e9 × 1000 + 4e4 / 2 × 1000²) = 1.616e13 → 16.16 ms
    # bytes 2e9 + 8 × 1000 × 1e5 = 2.8e9 → 2.8 ms, so compute-bound; 20.2 / 16.16 = 1.25
    assert out["prefill_flops"] == pytest.approx(1.616e13)
    assert out["prefill_bytes"] == pytest.approx(2.8e9)
    assert out["predicted_prefill_ms"] == pytest.approx(16.16)
    assert out["prefill_bound"] == "compute"
    assert out["prefill_ratio"] == pytest.approx(1.25)


def test_predicted_tokens_per_s_per_point() -> None:
    row = point(8, 1000, 3.5, prompt_len_mean=900.0, prefill_padding_waste=0.1, output_len_mean=201.0)
    out = roofline_table(pd.DataFrame([row]), MODEL, CEILINGS).iloc[0]
    # 8 × 200 real decode tokens over 8 active rows = 200 steps; wall 16.16 + 200 × 2.8 = 576.16 ms
    # 8 × 201 = 1608 tokens / 0.57616 s = 2790.89 tok/s
    assert out["predicted_tokens_per_s"] == pytest.approx(2790.89, rel=1e-5)


def test_predicted_curve_for_overlay() -> None:
    curve = predicted_curve(MODEL, CEILINGS, [1], prompt_len=100, output_len=11)
    row = curve.iloc[0]
    # decode: context 100 + 11 / 2 = 105.5 → bytes 2e9 + 105.5 × 1e5 = 2.01055e9 → 2.01055 ms (memory)
    # prefill: bytes 2e9 + 100 × 1e5 = 2.01e9 → 2.01 ms > FLOPs (2e11 + 2e4 × 1e4) / 1e15 = 0.2002 ms
    # wall 2.01 + 10 × 2.01055 = 22.1155 ms → 11 tokens / 0.0221155 s = 497.39 tok/s
    assert row["predicted_step_ms"] == pytest.approx(2.01055)
    assert row["predicted_prefill_ms"] == pytest.approx(2.01)
    assert row["predicted_tokens_per_s"] == pytest.approx(497.389, rel=1e-5)
    assert row["bound"] == "memory"


def test_analyse_reports_ridge_and_roofline_columns() -> None:
    points = make_points([1, 2, 4], [100, 190, 200], active_seqs_mean=[1, 2, 4], active_tokens_mean=[0, 0, 0],
                         decode_step_ms=[2.5, 2.5, 2.6], prompt_len_mean=[0.0] * 3, output_len_mean=[1.0] * 3,
                         prefill_padding_waste=[0.0] * 3, prefill_ms=[3.0] * 3)
    result = analyse(points, MODEL, CEILINGS)
    # context 0 → ridge 1000 (as above); batch 1: 2 ms predicted / 2.5 ms measured = 80 %
    assert result.ridge_batch == pytest.approx(1000)
    assert result.table.loc[0, "roofline_pct"] == pytest.approx(80.0)
    assert "Ridge batch ≈ 1 000 (at 0 cached tokens per row)" in result.notes[0]


def test_a_step_shorter_than_its_floor_is_named_in_a_note() -> None:
    # batch 1 and 2 at 0 cached tokens: floor 2 ms (as above); batch 4 decodes in 1.9 ms, under it
    points = make_points([1, 2, 4], [100, 190, 200], active_seqs_mean=[1, 2, 4], active_tokens_mean=[0, 0, 0],
                         decode_step_ms=[2.5, 2.0, 1.9], prompt_len_mean=[0.0] * 3, output_len_mean=[1.0] * 3,
                         prefill_padding_waste=[0.0] * 3, prefill_ms=[3.0] * 3)
    notes = [n for n in analyse(points, MODEL, CEILINGS).notes if "shorter than its roofline floor" in n]
    assert len(notes) == 1 and notes[0].startswith("At batch 4 the measured decode step")  # 2.0 ms is the floor itself
    fine = points.assign(decode_step_ms=[2.5, 2.5, 2.6])
    assert not any("shorter than its roofline floor" in n for n in analyse(fine, MODEL, CEILINGS).notes)


def test_no_roofline_without_calibration() -> None:
    result = analyse(make_points([1, 2], [100, 150]), MODEL, None)
    assert result.ridge_batch is None
    assert math.isnan(result.table.loc[0, "predicted_step_ms"])
    assert "This run has no calibration, so no roofline is drawn." in result.notes
    assert result.to_dict()["points"][0]["predicted_step_ms"] is None


def test_a_whole_cache_read_is_the_weights_and_the_allocated_kv_at_copy_bandwidth() -> None:
    # 16 GB of weights and 46.7 GB of allocated KV (8B at batch 64, 5 568 tokens a row) at 4.15 TB/s: 15.11 ms;
    # a point without a KV figure (an OOM) has none
    read = whole_cache_read_ms({"weight_bytes": 16e9}, {"copy_bytes_per_s": 4.15e12, "matmul_flops_per_s": 1e15},
                               [46.7e9, float("nan")])
    assert read[0] == pytest.approx(62.7e9 / 4.15e12 * 1e3) and read[0] == pytest.approx(15.108, abs=1e-3)
    assert math.isnan(read[1])


def test_no_shipped_demo_point_decodes_faster_than_its_roofline_floor(demo_store: Store) -> None:
    # the 8B clients run read 137 % of its floor at 512 clients while its decode step was the drain's
    # (docs/design.md, "A continuous point's decode step"); a step under its floor means the two were not taken
    # over the same steps, or the calibration is off
    shares = {}
    for run_id in demo_store.runs()["run_id"]:
        _, analysis = analysed_run(demo_store, run_id, None, PLATEAU_GAIN)
        pct = analysis.table["roofline_pct"].dropna()
        if not pct.empty:
            shares[run_id] = pct.max()
    assert len(shares) >= 10 and all(0 < share <= 100 for share in shares.values()), shares
