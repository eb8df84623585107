"""Measuring until known (docs/trust.md): the interval methods on hand-checked numbers, which runs a point
measures and when it stops, and a real CPU sweep that records draws, replays and the interval per point."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from batchscope.ingest import ingest_run
from batchscope.store import Store
from runners.metrics.interval import Interval, StepModel, by_draws, by_model
from runners.modes.draws import outcome, planned, replay_spread, runs, words
from runners.spec import SweepSpec
from tests.runner_helpers import REPO, TINY, run_runner


def test_draws_alone_is_students_t_over_the_draws() -> None:
    # [90, 100, 110]: mean 100, sd 10, t(2) = 4.303 → 4.303 × 10 / √3 = 24.84 % of the mean
    found = by_draws([90.0, 100.0, 110.0])
    assert found.estimate == 100.0 and found.half == pytest.approx(0.24844, abs=1e-5) and found.method == "draws"
    assert by_draws([100.0]).half == math.inf


def test_the_model_is_corrected_by_the_measured_draws_ratio_to_their_predictions() -> None:
    # the GPU runs 2 % slower than the model on every draw: the estimate is the host mean × 0.98, and the
    # interval is the host mean's own sampling error only (the ratios agree exactly)
    host = [100.0, 120.0, 80.0, 100.0]
    found = by_model([98.0, 117.6], [100.0, 120.0], host)
    assert found.estimate == pytest.approx(98.0) and found.prediction_error_max == pytest.approx(0.02)
    # pstdev(host) = 14.142; 1.96 × 14.142 / √4 / 100 = 13.86 %
    assert found.half == pytest.approx(0.13859, abs=1e-5) and found.predicted == (100.0, 120.0)
    # a model that misses by ± 10 % on two draws: t(1) = 12.706 × sd(0.9, 1.1) / √2 = 127 %, in quadrature
    wide = by_model([90.0, 110.0], [100.0, 100.0], [100.0] * 4)
    assert wide.half == pytest.approx(12.706 * math.sqrt(0.02) / math.sqrt(2), rel=1e-6)


def test_a_static_batch_runs_as_long_as_its_longest_output() -> None:
    # 0.5 ms per padded prompt token, 10 ms a decode step; a batch of 2 with prompts 8, 4 and outputs 3, 11:
    # 0.5 × 2 × 8 + 10 × (11 − 1) = 108 ms for 14 tokens → 129.6 tok/s
    model = StepModel.fit([(2, 8, 8.0), (4, 2, 4.0)], [10.0, 10.0, 12.0, 9.0])
    assert (model.prefill_ms_per_token, model.step_ms) == (0.5, 10.0)
    assert model.tokens_per_s([8, 4], [3, 11]) == pytest.approx(14 / 0.108)


def test_a_point_runs_its_plan_then_draws_until_known_or_a_budget_is_spent() -> None:
    spec = SweepSpec(model="tiny", repeats=3, replays=1, max_draws=6, target_interval=0.05)
    assert planned(spec) == [(0, 0), (0, 1), (1, 0), (2, 0)]
    wide = Interval(100.0, 0.2, "draws")
    made = list(runs(spec, lambda: wide, lambda: 0.0))
    assert [(r.draw, r.replay) for r in made] == [(0, 0), (0, 1), (1, 0), (2, 0), (3, 0), (4, 0)]
    assert outcome(spec, wide, made, 1.0) == {"draws": 5, "replays": 1, "target_interval": 0.05,
                                              "budget_spent": "draws"}
    assert len(list(runs(spec, lambda: Interval(100.0, 0.01, "model"), lambda: 0.0))) == 4  # known: stop
    assert len(list(runs(spec, lambda: wide, lambda: 400.0))) == 4  # past the 300 s budget
    assert outcome(spec, wide, made[:4], 400.0)["budget_spent"] == "time"
    # most_runs never undercuts the plan, so a sweep costs at most max(max_draws, repeats + replays) runs
    assert SweepSpec(model="tiny", repeats=8, max_draws=6).most_runs() == 9
    assert replay_spread({made[0]: 100.0, made[1]: 102.0, made[2]: 50.0}) == pytest.approx(0.02 / 1.01)
    assert words({"tokens_per_s_interval": 0.081, "interval_method": "draws", "draws": 5, "replays": 1,
                  "budget_spent": "draws"}) == "± 8.1% (draws) over 5 draws and 1 replay; the draw budget ran out first"


@pytest.fixture(scope="module")
def lognormal_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("measured") / "tiny-lognormal"
    done = run_runner(out, *TINY, "--batch-sizes", "1,4", "--prompt-len", "lognormal:16:0.5", "--output-len",
                      "lognormal:8:0.5", "--repeats", "3", "--warmup", "1", "--max-draws", "6", "--no-calibrate",
                      timeout=300)
    assert done.returncode == 0, done.stderr
    return out


def test_a_cpu_sweep_records_draws_replays_and_the_interval_of_every_point(lognormal_run: Path) -> None:
    for size in (1, 4):
        index = {1: 0, 4: 1}[size]
        summary = pq.read_table(lognormal_run / "points" / f"p{index:04d}.summary.parquet").to_pylist()[0]
        repeats = pq.read_table(lognormal_run / "points" / f"p{index:04d}.repeats.parquet").to_pylist()
        requests = pq.read_table(lognormal_run / "points" / f"p{index:04d}.requests.parquet").to_pylist()
        assert summary["replays"] == 1 and 3 <= summary["draws"] <= 5 and summary["repeats"] == len(repeats)
        assert summary["draws"] + summary["replays"] == len(repeats) and summary["requests"] == size * len(repeats)
        assert summary["interval_method"] == "model" and summary["tokens_per_s_interval"] > 0
        assert summary["target_interval"] == 0.05
        assert f"over {summary['draws']} draws and 1 replay" in (lognormal_run / "log.txt").read_text()
        # known within the target, or a budget ran out and says which, with the interval it reached
        assert (summary["budget_spent"] is None) == (summary["tokens_per_s_interval"] <= 0.05)
        assert summary["output_tokens_per_s_min"] < summary["output_tokens_per_s"] < summary["output_tokens_per_s_max"]
        assert [(r["draw"], r["replay"]) for r in repeats][:2] == [(0, 0), (0, 1)]
        assert all(r["predicted_tokens_per_s"] > 0 for r in repeats)
        # the replay ran the first draw's requests again; the next draw drew new ones
        lengths = {r["repeat"]: [(q["prompt_len"], q["output_len"]) for q in requests if q["repeat"] == r["repeat"]]
                   for r in repeats}
        assert lengths[0] == lengths[1]
        assert summary["replay_spread"] == pytest.approx(
            abs(repeats[0]["output_tokens_per_s"] - repeats[1]["output_tokens_per_s"])
            / ((repeats[0]["output_tokens_per_s"] + repeats[1]["output_tokens_per_s"]) / 2))


def test_its_report_json_gives_each_point_a_verdict_per_metric(lognormal_run: Path, tmp_path: Path) -> None:
    db = tmp_path / "history.duckdb"
    with Store(db) as store:
        ingest_run(store, lognormal_run)
        draws = store.points(["tiny-lognormal"])[["draws", "replays", "tokens_per_s_interval"]]
    assert draws.notna().all().all()
    shown = subprocess.run([sys.executable, "-m", "batchscope", "report", "tiny-lognormal", "--db", str(db),
                            "--format", "json"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    points = json.loads(shown.stdout)["points"]
    assert len(points) == 2
    for point in points:
        trust = point["trust"]
        assert {"throughput", "ttft_p95", "itl_p50", "e2e_p99"} <= set(trust)
        for verdict in trust.values():
            assert verdict["level"] in ("trusted", "caution", "untrusted") and verdict["reasons"]
            assert all(isinstance(reason, str) and reason.endswith(".") for reason in verdict["reasons"])
        assert trust["throughput"]["reasons"][0].startswith("Throughput ") or trust["throughput"]["level"] != "trusted"
        assert point["trust_worst"]["level"] in ("trusted", "caution", "untrusted")
        assert not any(key.startswith("trust_") and key not in ("trust_worst", "trust_working_point", "trust_sentence")
                       for key in point)
