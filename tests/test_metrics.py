"""Hand-checked static-batch metrics: percentiles, TTFT/ITL/E2E, padding waste, memory split."""
import pytest

from runners.engines.base import Batch, Generation
from runners.metrics import memory
from runners.metrics.static import padding_waste, static_repeat, summarise
from runners.metrics.stats import percentile
from runners.metrics.summary import Summary
from runners.results.runfolder import write_parquet
from runners.results.schemas import DETAIL, SUMMARY


def test_percentile_linear_interpolation():
    # sorted [1,2,3,4]: p50 at rank 1.5 → 2.5; p95 at rank 2.85 → 3.85; p0 → 1; p100 → 4
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert percentile([4, 1, 3, 2], 95) == pytest.approx(3.85)
    assert percentile([4, 1, 3, 2], 0) == 1
    assert percentile([4, 1, 3, 2], 100) == 4
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


def _result():
    # Two rows: prompts 4 and 2 (padded to 4), outputs 3 and 1 tokens.
    # Token times: token 0 at 10 ms (prefill), token 1 at 12 ms, token 2 at 15 ms.
    batch = Batch(prompt_ids=[[1, 2, 3, 4], [5, 6]], output_lens=[3, 1])
    gen = Generation(token_ms=[10.0, 12.0, 15.0], tokens=[[1, 1, 1], [1, 1, 1]], timing="perf_counter",
                     kv_allocated_bytes=0)
    return static_repeat(0, 0, batch, gen)


def test_request_rows():
    r = _result()
    first, second = r.requests
    assert first["ttft_ms"] == 10.0 and first["e2e_ms"] == 15.0       # its 3rd token is at 15 ms
    assert first["itl_ms_mean"] == pytest.approx(2.5)                   # gaps 2 and 3
    assert second["ttft_ms"] == 10.0 and second["e2e_ms"] == 10.0      # one token: done after prefill
    assert second["itl_ms_mean"] is None
    assert r.itl == [2.0, 3.0]


def test_step_rows_track_active_rows_and_tokens():
    steps = _result().steps
    assert [s["phase"] for s in steps] == ["prefill", "decode", "decode"]
    assert [s["duration_ms"] for s in steps] == [10.0, 2.0, 3.0]
    # step 1: only row 0 still generating (output 3 > 1): holds prompt 4 + 1 token = 5
    assert steps[1]["active_seqs"] == 1 and steps[1]["active_tokens"] == 5
    assert steps[0]["active_tokens"] == 6  # prefill: 4 + 2 real prompt tokens


def test_repeat_throughput():
    row = _result().row
    # 4 output tokens and 6 prompt tokens in 15 ms
    assert row["output_tokens_per_s"] == pytest.approx(4 / 0.015)
    assert row["input_tokens_per_s"] == pytest.approx(6 / 0.015)
    assert row["requests_per_s"] == pytest.approx(2 / 0.015)


def test_padding_waste():
    # prefill: 6 real of 8 slots → 0.25; decode: 2 steps × 2 rows = 4 slots, row 0 uses 2, row 1 none → 0.5
    assert padding_waste(_result().batch) == (pytest.approx(0.25), pytest.approx(0.5))


def test_summary_spreads_over_repeats():
    a, b = _result(), _result()
    b.row["output_tokens_per_s"] = 100.0
    s = summarise(0, 2, [a, b], warmup=1)
    assert s["output_tokens_per_s_min"] == 100.0
    assert s["output_tokens_per_s_max"] == pytest.approx(4 / 0.015)
    assert s["ttft_ms_p95"] == 10.0
    assert s["itl_ms_p50"] == pytest.approx(2.5)  # gaps [2,3,2,3] → median 2.5
    assert s["active_seqs_mean"] == 1.0


def test_memory_split_parts_add_up():
    # capacity 100; weights 40, KV 20 allocated (12 used); peak allocated 70 → activations 10;
    # reserved 80 → allocator reserve 10; device used 90 → other 10
    parts = memory.split(capacity=100, weights=40, kv_allocated=20, kv_used=12, peak_allocated=70,
                         reserved=80, device_used=90)
    assert parts["mem_activations"] == 10
    assert parts["mem_allocator_reserve"] == 10
    assert parts["mem_other"] == 10
    assert parts["mem_weights"] + parts["mem_kv_allocated"] + 30 == parts["mem_nvml_used"]


def test_an_endpoint_point_keeps_each_gpus_peak_in_its_measured_repeats_summed() -> None:
    def sample(point: int, repeat: int, gpu: int | None, used: float | None) -> dict:
        return {"point_index": point, "repeat": repeat, "gpu_index": gpu, "mem_used_bytes": used}

    samples = [sample(2, -1, 0, 90.0),  # setup: the server loading, never counted
               sample(2, 0, 0, 60.0), sample(2, 0, 1, 30.0), sample(2, 1, 0, 64.0), sample(2, 1, 1, 29.0),
               sample(3, 0, 0, 99.0)]  # the next point's
    # GPU 0 peaks at 64, GPU 1 at 30 inside the repeats: 94 of the two GPUs' 200
    assert memory.served(samples, 2, 200) == {"mem_nvml_used": 94, "mem_capacity": 200}
    cpu = [sample(2, 0, None, None), sample(2, 1, None, None)]  # a CPU or a remote server: no device count
    assert memory.served(cpu, 2, None) == {}
    assert memory.served(samples[:1], 2, 200) == {}  # nothing inside a repeat


def test_memory_split_unknown_parts_stay_unknown():
    parts = memory.split(capacity=100, weights=40, kv_allocated=20, kv_used=12, peak_allocated=50,
                         reserved=None, device_used=None)
    assert parts["mem_activations"] == 0  # never negative
    assert parts["mem_allocator_reserve"] is None and parts["mem_other"] is None


def test_a_summary_key_not_in_the_schema_is_an_error_not_a_null_column():
    s = Summary(point_index=0, status="ok")
    with pytest.raises(KeyError, match="ouput_tokens_per_s"):
        s.update(ouput_tokens_per_s=1.0)  # misspelled
    with pytest.raises(KeyError, match="not summary columns"):
        Summary(batch=4)
    with pytest.raises(KeyError):
        s["goodput"]
    row = s.row()
    assert list(row) == SUMMARY.names and row["status"] == "ok" and row["prefill_ms"] is None


def test_a_detail_row_key_not_in_its_schema_is_an_error(tmp_path):
    with pytest.raises(KeyError, match="durration_ms"):
        write_parquet(tmp_path / "steps.parquet", [{"point_index": 0, "durration_ms": 1.0}], DETAIL["steps"])
    assert not list(tmp_path.iterdir())  # nothing half-written
