"""Continuous batching on CPU with the tiny preset: scheduler rules, engine correctness, spec, end to end."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from batchscope.ingest import ingest_run
from batchscope.store import Store
from runners.engines.base import Batch
from runners.engines.continuous import ContinuousEngine, buckets
from runners.engines.fast import FastEngine
from runners.engines.kv_layout import KV_BLOCK_SIZE
from runners.engines.models import load
from runners.engines.scheduler import Arrivals, BlockPool, Request, Scheduler
from runners.results.runfolder import write_parquet
from runners.spec import problems, validate
from runners.spec.continuous import points, requests_per_point
from tests.runner_helpers import run_runner

BIG = 10**9
REPO = Path(__file__).resolve().parents[1]
DECODE_COLUMNS = ("decode_step_ms", "decode_step_ms_p95", "active_seqs_mean", "active_tokens_mean", "active_tokens_max")


@pytest.fixture(scope="module")
def static() -> FastEngine:
    return FastEngine(load("tiny", "float32", torch.device("cpu"), seed=3))


def workload(n: int, seed: int, prompt_hi: int = 40, output_hi: int = 12) -> tuple[list[list[int]], list[int]]:
    rng = random.Random(seed)
    prompts = [[rng.randint(1, 511) for _ in range(rng.randint(1, prompt_hi))] for _ in range(n)]
    return prompts, [rng.randint(1, output_hi) for _ in range(n)]


def serve(static: FastEngine, slots: int, prompts, outputs, arrivals: dict, budget: int = BIG,
          kv_tokens: int | None = None, record: bool = False, block_size: int = KV_BLOCK_SIZE):
    engine = ContinuousEngine(static.decoder, torch.device("cpu"))
    engine.setup(slots, max(len(p) + o for p, o in zip(prompts, outputs)), kv_tokens=kv_tokens,
                 block_size=block_size)
    return engine.run(prompts, outputs, {**arrivals, "seed": 0}, budget, record_tokens=record)


def test_greedy_tokens_equal_the_static_engine_with_slot_reuse_and_chunked_prefill(static) -> None:
    prompts, outputs = workload(12, seed=1)
    want = [static.generate(Batch([p], [o])).tokens[0][:o] for p, o in zip(prompts, outputs)]
    result = serve(static, 3, prompts, outputs, dict(concurrency=5), budget=16, record=True)
    assert [result.tokens[i] for i in range(12)] == want
    assert len({r.slot for r in result.requests}) == 3  # every slot was reused
    assert any(s.prefill_tokens == 16 for s in result.steps)  # some prompt was chunked at the budget
    assert all(s.prefill_tokens + s.decode_tokens <= 16 for s in result.steps)


def test_every_request_gets_its_length_and_no_slot_is_shared_at_once(static) -> None:
    prompts, outputs = workload(20, seed=2)
    result = serve(static, 4, prompts, outputs, dict(rate=2000.0), budget=24)
    for r in result.requests:
        assert len(r.token_s) == r.output_len
        assert r.arrival_s <= r.admit_s <= r.token_s[0]
    by_slot: dict[int, list[tuple[float, float]]] = {}
    for r in result.requests:
        by_slot.setdefault(r.slot, []).append((r.admit_s, r.token_s[-1]))
    for spans in by_slot.values():
        spans.sort()
        assert all(prev_end <= start for (_, prev_end), (start, _) in zip(spans, spans[1:]))
    assert max(s.running for s in result.steps) <= 4


def test_queue_wait_is_zero_with_room_and_grows_with_one_slot(static) -> None:
    prompts, outputs = workload(12, seed=3)
    roomy = serve(static, 4, prompts, outputs, dict(concurrency=4))
    assert all(r.admit_s == r.arrival_s for r in roomy.requests)
    single = serve(static, 1, prompts, outputs, dict(concurrency=4))
    waits = [r.admit_s - r.arrival_s for r in single.requests]
    assert min(waits) == 0 and max(waits) > 0
    assert sum(waits) > 3 * sum(r.admit_s - r.arrival_s for r in roomy.requests) + 1e-3


def test_full_pool_makes_admission_wait_instead_of_failing(static) -> None:
    prompts, outputs = workload(8, seed=4, prompt_hi=20, output_hi=6)
    longest = max(len(p) + o for p, o in zip(prompts, outputs))
    result = serve(static, 4, prompts, outputs, dict(concurrency=8), kv_tokens=longest, block_size=4)
    assert all(len(r.token_s) == r.output_len for r in result.requests)
    assert result.admission_waits > 0
    assert max(s.running for s in result.steps) < 4  # the pool, not the slots, limited the batch
    assert max(s.kv_blocks for s in result.steps) * 4 <= -(-longest // 4) * 4


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_paged_tokens_equal_the_static_engine_at_several_block_sizes(static, block_size: int) -> None:
    prompts, outputs = workload(10, seed=5)
    want = [static.generate(Batch([p], [o])).tokens[0][:o] for p, o in zip(prompts, outputs)]
    result = serve(static, 4, prompts, outputs, dict(concurrency=6), budget=24, record=True, block_size=block_size)
    assert [result.tokens[i] for i in range(10)] == want
    assert result.preemptions == 0


def test_a_pool_too_small_preempts_counts_it_and_returns_every_token_unchanged(static) -> None:
    prompts, outputs = workload(12, seed=6, prompt_hi=24, output_hi=16)
    want = [static.generate(Batch([p], [o])).tokens[0][:o] for p, o in zip(prompts, outputs)]
    longest = max(len(p) + o for p, o in zip(prompts, outputs))
    result = serve(static, 6, prompts, outputs, dict(concurrency=12), budget=64, record=True,
                   kv_tokens=longest + 8, block_size=4)
    assert result.preemptions > 0 and sum(s.preemptions for s in result.steps) == result.preemptions
    assert sum(r.preemptions for r in result.requests) == result.preemptions
    assert [result.tokens[i] for i in range(12)] == want
    assert all(len(r.token_s) == r.output_len for r in result.requests)


def test_no_block_is_ever_held_by_two_live_requests() -> None:
    rng = random.Random(7)
    pool = BlockPool(blocks=16, block_size=4)  # 60 tokens: the longest request (50) fits alone
    sched = Scheduler(slots=6, token_budget=32, pool=pool)
    requests = [Request(i, rng.randint(1, 30), rng.randint(1, 20)) for i in range(30)]
    source = Arrivals(requests, concurrency=10)
    now, preempted = 0.0, 0
    while True:
        for r in source.arrived(now):
            sched.add(r)
        plan = sched.plan(now)
        if plan.empty:
            break
        held = [b for r in sched.running.values() for b in r.blocks]
        assert len(held) == len(set(held)) and 0 not in held
        assert len(held) + len(pool.free) == pool.total
        for r in sched.running.values():
            assert len(r.blocks) * 4 >= r.kv_held + (r.prefilled == r.prefill_len)
        preempted += len(plan.preempted)
        now += 1.0
        for r in sched.commit(plan, now):
            source.finished(r, now)
    assert sched.idle and all(r.done for r in requests)
    assert preempted == sched.preemptions > 0 and pool.used == 0


def test_scheduler_admits_fifo_within_slots_budget_and_capacity() -> None:
    reqs = [Request(i, 10, 3) for i in range(4)]
    source = Arrivals(reqs, concurrency=4)
    sched = Scheduler(slots=2, token_budget=15, pool=BlockPool(BIG // 10**4, 16))
    for r in source.arrived(0.0):
        sched.add(r)
    plan = sched.plan(0.0)
    assert [(r.index, pos, n) for r, pos, n in plan.prefills] == [(0, 0, 10), (1, 0, 5)]
    assert [r.slot for r in sched.running.values()] == [0, 1]
    sched.commit(plan, 1.0)
    plan = sched.plan(1.0)
    assert [r.index for r in plan.decodes] == [0]
    assert [(r.index, pos, n) for r, pos, n in plan.prefills] == [(1, 5, 5)]


def test_poisson_arrivals_are_seeded_and_closed_loop_waits_for_a_finish() -> None:
    times = lambda seed: [t for t, _, _ in sorted(Arrivals([Request(i, 1, 1) for i in range(5)], rate=10.0,
                                                           seed=seed).due)]
    assert times(1) == times(1) != times(2)
    closed = Arrivals([Request(i, 1, 1) for i in range(3)], concurrency=2)
    assert [r.index for r in closed.arrived(0.0)] == [0, 1]
    assert closed.next_time() is None  # the third waits for a client to be free
    closed.finished(Request(0, 1, 1, client=0), 2.5)
    assert [(r.index, r.arrival_s) for r in closed.arrived(2.5)] == [(2, 2.5)]


def test_a_closed_loop_clients_next_request_arrives_its_think_time_after_the_last_one_ends() -> None:
    thinking = Arrivals([Request(i, 1, 1) for i in range(3)], concurrency=2, think_s=0.02)
    assert [(r.index, r.arrival_s) for r in thinking.arrived(0.0)] == [(0, 0.0), (1, 0.0)]  # the first at once
    thinking.finished(Request(0, 1, 1, client=0), 2.5)
    assert thinking.arrived(2.51) == [] and thinking.next_time() == pytest.approx(2.52)
    assert [(r.index, r.arrival_s, r.client) for r in thinking.arrived(2.52)] == [(2, pytest.approx(2.52), 0)]
    with pytest.raises(ValueError, match="closed-loop"):
        Arrivals([Request(0, 1, 1)], rate=10.0, think_s=0.02)
    with pytest.raises(ValueError, match="at least 0"):
        Arrivals([Request(0, 1, 1)], concurrency=1, think_s=-0.01)


def test_in_process_clients_with_a_think_time_arrive_off_the_step_boundary(static) -> None:
    """With none, each next request arrives exactly as the step that finished the last one ends; with one, that
    much later, so it can land inside a step in flight (the served engine's arrival phase)."""
    prompts, outputs = workload(10, seed=4)
    for think_s in (0.0, 0.003):
        result = serve(static, 2, prompts, outputs, dict(concurrency=2, think_s=think_s))
        ends = sorted(r.token_s[-1] for r in result.requests)
        later = [r for r in result.requests if r.arrival_s > 0]
        assert len(later) == 8
        for r in later:  # each arrives `think_s` after some request ended (its client's last one)
            assert min(abs(r.arrival_s - think_s - end) for end in ends) < 1e-9, (r.arrival_s, think_s)
            assert r.arrival_s <= r.admit_s


def test_buckets_are_powers_of_two_then_steps_of_64_capped_by_max_num_seqs() -> None:
    assert buckets(1) == [1]
    assert buckets(6) == [1, 2, 4, 6]
    assert buckets(8) == [1, 2, 4, 8]
    assert buckets(200) == [1, 2, 4, 8, 16, 32, 64, 128, 192, 200]


CONT = {"model": "tiny", "mode": "continuous", "engine": "fast"}


@pytest.mark.parametrize("raw, field, words", [
    ({**CONT, "engine": "hf-generate", "concurrency": 2}, "engine", "fast engine"),
    (CONT, "arrival", "needs a load"),
    ({**CONT, "arrival": "uniform:3"}, "arrival", "poisson:RATE"),
    ({**CONT, "arrival": "poisson:0"}, "arrival", "positive"),
    ({**CONT, "arrival": "poisson:2", "concurrency": 4}, "concurrency", "not both"),
    ({**CONT, "arrival": "poisson:1,2", "max_num_seqs": "1,2"}, "arrival", "only one axis"),
    ({**CONT, "concurrency": "0"}, "concurrency", "≥ 1"),
    ({**CONT, "concurrency": 4, "max_num_seqs": 64, "max_num_batched_tokens": 32}, "max_num_batched_tokens", "≥ max_num_seqs"),
    ({**CONT, "concurrency": 4, "num_requests": 0}, "num_requests", "≥ 1"),
    ({**CONT, "concurrency": 4, "kv_cache_tokens": 10}, "kv_cache_tokens", "longest request"),
    ({**CONT, "concurrency": 4, "gpu_memory_utilization": 1.5}, "gpu_memory_utilization", "at most 0.98"),
    ({**CONT, "concurrency": 4, "gpu_memory_utilization": "most"}, "gpu_memory_utilization", "not a number"),
    ({**CONT, "concurrency": 4, "slo_metric": "tpot"}, "slo_metric", "one of"),
    ({**CONT, "concurrency": 4, "slo_ms": -5}, "slo_ms", "positive"),
    ({**CONT, "concurrency": 4, "prompt_len": "fixed:2040"}, "prompt_len", "context"),
    ({**CONT, "arrival": "poisson:2", "think_ms": 20}, "think_ms", "give a concurrency"),
    ({**CONT, "concurrency": 4, "think_ms": -1}, "think_ms", "≥ 0"),
    ({**CONT, "concurrency": "1,16", "num_requests": 8}, "concurrency", "at most 8 would ever be in flight"),
    ({**CONT, "arrival": "poisson:2", "requests_per_client": 4}, "requests_per_client", "give a concurrency"),
    ({**CONT, "concurrency": 4, "requests_per_client": -1}, "requests_per_client", "≥ 0"),
    ({**CONT, "engine": "endpoint", "mode": "endpoint", "url": "http://127.0.0.1:9/v1", "concurrency": "4,65"},
     "concurrency", "give num_requests ≥ 65"),
])
def test_spec_rejects_bad_continuous_options_by_field(raw: dict, field: str, words: str) -> None:
    found = problems(raw)
    assert field in found and words in found[field], found


@pytest.mark.parametrize("num_requests, per_client, clients, served", [
    (64, 0, 16, 64),  # unset: the whole workload at every point
    (64, 4, 1, 4),  # 4 × 1
    (64, 4, 8, 32),  # 4 × 8
    (64, 4, 16, 64),  # 4 × 16 = 64: all of it
    (64, 4, 512, 64),  # never more than the workload
    (64, 4, None, 64),  # Poisson arrivals have no clients: the whole workload
])
def test_requests_per_point_is_per_client_times_clients_up_to_the_workload(num_requests, per_client, clients,
                                                                            served) -> None:
    assert requests_per_point(num_requests, per_client, clients) == served


def test_spec_points_follow_the_swept_axis() -> None:
    rate_sweep = validate({**CONT, "arrival": "poisson:4,1", "max_num_seqs": 8})
    assert [(p.axis, p.value, p.batch_size) for p in points(rate_sweep)] == [
        ("arrival_rate", 1.0, 8), ("arrival_rate", 4.0, 8)]
    seq_sweep = validate({**CONT, "concurrency": 16, "max_num_seqs": "pow2:1:4"})
    assert [(p.axis, p.batch_size, p.concurrency) for p in points(seq_sweep)] == [
        ("max_num_seqs", 1, 16), ("max_num_seqs", 2, 16), ("max_num_seqs", 4, 16)]
    client_sweep = validate({**CONT, "concurrency": "2,8", "max_num_seqs": 4})
    assert [(p.axis, p.batch_size, p.max_num_seqs) for p in points(client_sweep)] == [
        ("concurrency", 2, 4), ("concurrency", 8, 4)]
    assert problems({"model": "tiny", "batch_sizes": "1,2"}) == {}  # static mode is untouched


def test_cli_continuous_sweep_writes_a_complete_run_folder_and_ingests(tmp_path: Path) -> None:
    out = tmp_path / "cont"
    proc = run_runner(out, "--model", "tiny", "--dtype", "float32", "--device", "cpu", "--engine", "fast",
                      "--mode", "continuous", "--max-num-seqs", "1,4", "--arrival", "poisson:40",
                      "--num-requests", "10", "--prompt-len", "uniform:4:40", "--output-len", "uniform:1:8",
                      "--max-num-batched-tokens", "16", "--repeats", "2", "--warmup", "1", "--no-calibrate",
                      "--slo-metric", "e2e", "--slo-ms", "5000", timeout=300)
    assert proc.returncode == 0, proc.stderr
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "done" and status["points_done"] == status["points_total"] == 2
    for index, slots in enumerate((1, 4)):
        summary = pq.read_table(out / "points" / f"p{index:04d}.summary.parquet").to_pylist()[0]
        assert summary["status"] == "ok", summary["error"]
        assert (summary["batch_size"], summary["max_num_seqs"], summary["sweep_axis"]) == (slots, slots, "max_num_seqs")
        assert summary["arrival_rate"] == 40.0 and summary["goodput_slo"] == "e2e<=5000ms"
        assert 0 < summary["kv_occupancy_max"] <= 1 and summary["goodput_rps"] > 0
        assert summary["queue_ms_p50"] is not None and summary["ttft_ms_p50"] >= summary["queue_ms_p50"]
        requests = pq.read_table(out / "points" / f"p{index:04d}.requests.parquet").to_pandas()
        assert len(requests) == 10 * summary["repeats"] and (requests["e2e_ms"] >= requests["ttft_ms"]).all()
        # an open-loop draw is its request set and arrivals, each predicted by the slot-queue model
        assert summary["interval_method"] == "queue" and summary["replays"] == 1 and summary["draws"] >= 2
        assert summary["draws"] + summary["replays"] == summary["repeats"] <= 6
        assert summary["prediction_error_max"] is not None and summary["tokens_per_s_interval"] is not None
        repeats = pq.read_table(out / "points" / f"p{index:04d}.repeats.parquet").to_pandas()
        assert repeats.loc[repeats["replay"] == 0, "predicted_tokens_per_s"].gt(0).all()
        steps = pq.read_table(out / "points" / f"p{index:04d}.steps.parquet").to_pandas()
        assert (steps["prefill_tokens"] + steps["decode_tokens"] <= 16).all()
        assert set(steps["phase"]) <= {"prefill", "decode", "mixed"}
    store = Store(tmp_path / "history.duckdb")
    report = ingest_run(store, out)
    assert report.points_added == 2 and not report.warnings
    table = store.points([out.name])
    assert list(table["max_num_seqs"]) == [1, 4] and table["queue_ms_p95"].notna().all()


def test_form_sends_continuous_options_only_in_that_mode_and_checks_them() -> None:
    from batchscope.ui.form import SweepForm, check

    static_form = SweepForm(model="tiny", engine="fast")
    assert "max_num_seqs" not in static_form.spec_dict()
    from batchscope.analysis import SLO

    form = SweepForm(model="tiny", engine="fast", mode="continuous", load="concurrency", concurrency="4",
                     max_num_seqs="1,2", slo=SLO("e2e", 95, 800.0))
    raw = form.spec_dict()
    assert (raw["concurrency"], raw["max_num_seqs"], raw["slo_metric"], raw["slo_ms"]) == ("4", "1,2", "e2e", 800.0)
    assert "arrival" not in raw and check(form) == {}
    form.concurrency = "2,4"
    assert "only one axis" in check(form)["concurrency"]


def test_form_memory_estimate_in_continuous_mode_is_per_max_num_seqs() -> None:
    from batchscope.ui.form import SweepForm, memory_estimate

    form = SweepForm(model="tiny", engine="fast", mode="continuous", load="concurrency", concurrency="4",
                     max_num_seqs="1,2", prompt_len="fixed:100", output_len="fixed:20")
    estimate = memory_estimate(form, 10**12)
    assert estimate.error is None and not estimate.warnings
    assert estimate.table["max_num_seqs"].tolist() == [1, 2] and estimate.table["KV tokens per slot"].tolist() == [128, 128]


def test_chart_axis_title_names_the_batch_limit_of_each_run_kind() -> None:
    import pandas as pd

    from batchscope.charts.frames import axis_title

    static_table = pd.DataFrame({"batch_size": [1, 2], "sweep_axis": [None, None]})
    seqs_table = pd.DataFrame({"batch_size": [1, 2], "sweep_axis": ["max_num_seqs"] * 2})
    assert axis_title(static_table) == "batch size (log2)"
    assert axis_title(static_table, seqs_table) == "batch size · max_num_seqs (log2)"
    assert axis_title(pd.DataFrame({"sweep_axis": ["concurrency"]})) == "concurrency (log2)"


@pytest.fixture(scope="module")
def closed_loop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed loop of 1 and 3 clients with two requests each, over a workload of 5 requests."""
    out = tmp_path_factory.mktemp("closed-loop") / "per-client"
    proc = run_runner(out, "--model", "tiny", "--dtype", "float32", "--device", "cpu", "--engine", "fast",
                      "--mode", "continuous", "--max-num-seqs", "4", "--concurrency", "1,3", "--requests-per-client",
                      "2", "--num-requests", "5", "--prompt-len", "uniform:4:40", "--output-len", "uniform:1:6",
                      "--repeats", "2", "--warmup", "0", "--target-interval", "0", "--replays", "0", "--no-calibrate",
                      timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def test_requests_per_client_serves_the_first_of_the_same_workload_at_each_concurrency(closed_loop: Path,
                                                                                         tmp_path: Path) -> None:
    """Two clients' worth per client: 1 client serves the workload's first 2 requests, 3 clients all 5 (not 6)."""
    out = closed_loop
    served = {}
    for index, clients in enumerate((1, 3)):
        requests = pq.read_table(out / "points" / f"p{index:04d}.requests.parquet").to_pandas()
        assert set(requests["repeat"]) == {0, 1}
        served[clients] = {r: list(rows.sort_values("request_index")["prompt_len"])
                           for r, rows in requests.groupby("repeat")}
    assert all(len(served[1][r]) == 2 and len(served[3][r]) == 5 for r in (0, 1))
    assert all(served[1][r] == served[3][r][:2] for r in (0, 1))
    # output tokens/s is the rate while requests still arrived: the drain after the last one is left out
    repeats = pq.read_table(out / "points" / "p0001.repeats.parquet").to_pandas()
    loaded_ms = repeats["loaded_end_ms"] - repeats["loaded_start_ms"]
    assert loaded_ms.notna().all() and (loaded_ms > 0).all() and (repeats["loaded_end_ms"] < repeats["wall_ms"]).all()
    assert (repeats["loaded_output_tokens"] < repeats["output_tokens"]).all()
    rate = repeats["loaded_output_tokens"] / loaded_ms * 1e3
    assert list(repeats["output_tokens_per_s"]) == pytest.approx(list(rate))
    assert json.loads((out / "spec.json").read_text())["requests_per_client"] == 2
    # its latencies are over the requests that arrived inside that window: the first round, all three clients'
    # first requests sent at the start, is left out; the two sent as clients' first requests ended count
    requests = pq.read_table(out / "points" / "p0001.requests.parquet").to_pandas()
    assert not requests.loc[requests["arrival_ms"] == 0.0, "latency_counted"].any()
    assert (requests["arrival_ms"] == 0.0).sum() == 3 * 2
    counted = requests[requests["latency_counted"]]
    summary = pq.read_table(out / "points" / "p0001.summary.parquet").to_pylist()[0]
    assert summary["latency_requests"] == len(counted) == 2 * 2 and summary["requests"] == 5 * 2
    assert summary["ttft_ms_p50"] == pytest.approx(counted["ttft_ms"].median())
    env = json.loads((out / "env.json").read_text())
    assert env["latency_basis"] == "arrivals in the load window"
    # its decode step and active rows are over the decode-only steps that ended inside that window
    window = repeats[["repeat", "loaded_start_ms", "loaded_end_ms"]]
    steps = pq.read_table(out / "points" / "p0001.steps.parquet").to_pandas().merge(window, on="repeat")
    end = steps["start_ms"] + steps["duration_ms"]
    inside = steps[(steps["phase"] == "decode") & (end > steps["loaded_start_ms"]) & (end <= steps["loaded_end_ms"])]
    assert 0 < len(inside) < (steps["phase"] == "decode").sum()  # the drain's decode-only steps are left out
    assert summary["decode_step_ms"] == pytest.approx(inside["duration_ms"].median())
    assert summary["active_tokens_mean"] == pytest.approx(inside["active_tokens"].mean())
    assert env["step_basis"] == "decode-only steps that ended in the load window"
    with Store(tmp_path / "history.duckdb") as store:  # the trust checks count the same requests
        ingest_run(store, out)
        evidence = store.point_evidence(out.name).set_index("point_index")
    assert (evidence.loc[1, "latency_requests"], evidence.loc[1, "requests"]) == (4, 10)


def test_bench_step_basis_gives_a_run_made_before_it_what_the_runner_now_writes(closed_loop: Path,
                                                                               tmp_path: Path) -> None:
    # the shipped clients run was re-derived by bench/step_basis.py: on a run whose five columns and env.json's
    # step_basis are taken away, as a run made before, it must write back what the runner wrote
    made_before = tmp_path / closed_loop.name
    shutil.copytree(closed_loop, made_before)
    env = json.loads((made_before / "env.json").read_text())
    (made_before / "env.json").write_text(json.dumps({k: v for k, v in env.items() if k != "step_basis"}))
    written = {}
    for file in sorted((made_before / "points").glob("*.summary.parquet")):
        table = pq.read_table(file)
        written[file.name] = table.to_pylist()[0]
        write_parquet(file, [{**written[file.name], **dict.fromkeys(DECODE_COLUMNS)}], table.schema)
    done = subprocess.run([sys.executable, str(REPO / "bench" / "step_basis.py"), str(made_before)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stdout.splitlines()) == len(written) == 2
    for name, row in written.items():
        again = pq.read_table(made_before / "points" / name).to_pylist()[0]
        assert {k: again[k] for k in DECODE_COLUMNS} == pytest.approx({k: row[k] for k in DECODE_COLUMNS})
        assert {k: v for k, v in again.items() if k not in DECODE_COLUMNS} == {
            k: v for k, v in row.items() if k not in DECODE_COLUMNS}
    assert json.loads((made_before / "env.json").read_text()) == env
