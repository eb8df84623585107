"""Measuring until known (docs/trust.md): the interval methods on hand-checked numbers, which runs a point
measures and when it stops, and a real CPU sweep that records draws, replays and the interval per point."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from batchscope.ingest import ingest_run
from batchscope.store import Store
from runners.metrics.interval import (Interval, StaticDraw, StepModel, by_draws, by_model, decode_kv_tokens,
                                      static_interval)
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
    found = by_model([98.0, 117.6], [100.0, 120.0], host, "model")
    assert found.estimate == pytest.approx(98.0) and found.prediction_error_max == pytest.approx(0.02)
    # pstdev(host) = 14.142; 1.96 × 14.142 / √4 / 100 = 13.86 %
    assert found.half == pytest.approx(0.13859, abs=1e-5) and found.predicted == (100.0, 120.0)
    # a model that misses by ± 10 % on two draws: t(1) = 12.706 × sd(0.9, 1.1) / √2 = 127 %, in quadrature
    wide = by_model([90.0, 110.0], [100.0, 100.0], [100.0] * 4, "model")
    assert wide.half == pytest.approx(12.706 * math.sqrt(0.02) / math.sqrt(2), rel=1e-6)


def test_a_static_batch_runs_as_long_as_its_longest_output() -> None:
    # prefills of 100 and 300 padded tokens took 12 and 16 ms: 10 ms fixed + 0.02 ms a token; decode steps' median
    # 10 ms, at one KV length each run (no slope). A batch of 2 with prompts 8, 4 (16 padded tokens) and outputs
    # 3, 11: 10 + 0.02 × 16 + 10 × (11 − 1) = 110.32 ms for 14 tokens
    model = StepModel.fit([(100, 12.0), (300, 16.0)], [[(50, 10.0), (50, 10.0)], [(50, 12.0), (50, 9.0)]], True)
    assert model.prefill_fixed_ms == pytest.approx(10.0) and model.prefill_ms_per_token == pytest.approx(0.02)
    assert (model.step_fixed_ms, model.step_ms_per_kv_token) == (10.0, 0.0)
    assert model.tokens_per_s([8, 4], [3, 11]) == pytest.approx(14 / 0.11032)


def test_a_decode_step_grows_with_the_kv_it_attends_to_padded_or_its_rows_own() -> None:
    # a batch of 2, prompts 500 and 300: step k attends to 2 × (500 + k) KV tokens where rows are padded to the
    # longest prompt (hf-generate), to 500 + 300 + 2k where each row continues from its own (the fast engine)
    assert decode_kv_tokens([500, 300], 1, True) == 1002 and decode_kv_tokens([500, 300], 2, True) == 1004
    assert decode_kv_tokens([500, 300], 1, False) == 802 and decode_kv_tokens([500, 300], 2, False) == 804
    # two runs whose steps rise 2 and 4 ms per 1 000 KV tokens: the median of the runs' own slopes is 0.003 ms a
    # token; every step less 0.003 ms × its KV is 7, 6 and 5, 6, 7 ms: fixed part 6 ms
    runs = [[(1000, 10.0), (2000, 12.0)], [(1000, 8.0), (2000, 12.0), (3000, 16.0)]]
    model = StepModel.fit([(100, 5.0)], runs, True)
    assert model.step_ms_per_kv_token == pytest.approx(0.003) and model.step_fixed_ms == pytest.approx(6.0)
    # outputs 3 and 1 after those prompts: steps 1 and 2 attend to 1 002 and 1 004 tokens,
    # 2 × 6 + 0.003 × 2 006 = 18.018 ms; the rows' own KV, 802 and 804: 2 × 6 + 0.003 × 1 606 = 16.818 ms
    assert model.decode_ms([500, 300], [3, 1]) == pytest.approx(18.018)
    assert StepModel.fit([(100, 5.0)], runs, False).decode_ms([500, 300], [3, 1]) == pytest.approx(16.818)
    # a step that gets shorter as the KV grows is noise: no slope, the median step
    falling = StepModel.fit([(100, 5.0)], [[(1000, 12.0), (2000, 10.0), (3000, 11.0)]], True)
    assert (falling.step_ms_per_kv_token, falling.step_fixed_ms) == (0.0, 11.0)
    # a slope so steep that the fixed part would fall below zero (each run 0.02 ms a token; every step less that:
    # −10, −10, −2, −2, 6, 6, 6 ms, median −2): the step goes through the origin at the steps' median ms per
    # token (10/1000, 12/1100, 20/1100, 22/1200, 30/1200, 32/1300, 34/1400: 22/1200), so no draw is predicted to
    # decode in less than nothing
    steep = StepModel.fit([(100, 5.0)], [[(1000, 10.0), (1100, 12.0)], [(1100, 20.0), (1200, 22.0)],
                                         [(1200, 30.0), (1300, 32.0), (1400, 34.0)]], True)
    assert steep.step_fixed_ms == 0.0 and steep.step_ms_per_kv_token == pytest.approx(22 / 1200)
    assert steep.decode_ms([10], [3]) == pytest.approx((22 / 1200) * (11 + 12))


def test_a_slow_stretch_in_one_run_does_not_tilt_the_step() -> None:
    # three runs whose steps do not move with the KV (10 ms); a busy host made one run's last steps 20 ms.
    # Pooled, a line through every step would rise; the median of the runs' own slopes stays 0.
    flat = [(k, 10.0) for k in range(1000, 1100)]
    stretch = [(k, 10.0 if k < 1050 else 20.0) for k in range(1000, 1100)]
    model = StepModel.fit([(100, 5.0)], [flat, flat, stretch], True)
    assert (model.step_ms_per_kv_token, model.step_fixed_ms) == (0.0, 10.0)


def test_a_static_point_is_modelled_on_the_kv_its_engine_reads() -> None:
    # two-row draws whose decode steps take 1 ms + 1 µs per KV token of the rows' own prompts plus the tokens made
    # (the fast engine's rows continue from their own length), 10 decode steps each, prefills a flat 10 ms.
    # Prompts 100 + 100, 300 + 100 and 200 + 200: the draws share one line in their own KV, so each, held out, is
    # predicted exactly; over the padded KV (2 × longest prompt) the 300 + 100 draw's steps sit 200 tokens to the
    # right of where its time says, so the model read that way misses
    def draw(prompts: list[int]) -> StaticDraw:
        steps = [(k, 1.0 + 0.001 * (sum(prompts) + 2 * k)) for k in range(1, 11)]
        return StaticDraw(prompts, [11, 11], 10.0, steps, 22 / (10.0 + sum(ms for _, ms in steps)) * 1000)

    draws = [draw([100, 100]), draw([300, 100]), draw([200, 200])]
    host = [([150, 150], [11, 11])]
    assert static_interval(draws, host, False).prediction_error_max == pytest.approx(0.0, abs=1e-9)
    assert static_interval(draws, host, True).prediction_error_max > 0.01


def test_the_prefill_line_stays_physical() -> None:
    # noise that tilts the line down (20 ms at 100 tokens, 10 ms at 300) reads as a fixed 15 ms
    flat = StepModel.fit([(100, 20.0), (300, 10.0)], [], True)
    assert (flat.prefill_fixed_ms, flat.prefill_ms_per_token) == (15.0, 0.0)
    # one length gives no slope: through the origin, at the mean (11 ms ÷ 200 tokens)
    one = StepModel.fit([(200, 10.0), (200, 12.0)], [], True)
    assert (one.prefill_fixed_ms, one.prefill_ms_per_token) == (0.0, pytest.approx(0.055))
    # a long prompt's prefill grows faster than its tokens: the line's fixed part comes out below zero
    # (100 → 50 ms, 200 → 150 ms: −50 ms + 1 ms a token), and is read as no less than 0 ms
    steep = StepModel.fit([(100, 50.0), (200, 150.0)], [], True)
    assert steep.prefill_fixed_ms == pytest.approx(-50.0) and steep.prefill_ms([20]) == 0.0
    assert steep.prefill_ms([300]) == pytest.approx(250.0)


def test_each_draw_is_predicted_by_the_model_fitted_without_it() -> None:
    # one-row draws, 11 output tokens (10 decode steps of 1 ms). Prefills of 100, 200, 300 tokens took 11, 12
    # and 19 ms. Fitted without it, the third is predicted on the line through the first two (10 ms + 0.01 ms a
    # token: 13 ms), so its 6 ms miss shows: predicted 11 / 23 ms, measured 11 / 29 ms.
    def steps(prompt: int, ms: float) -> list[tuple[int, float]]:
        return [(k, ms) for k in range(1, 11)]

    draws = [StaticDraw([n], [11], ms, steps(n, 1.0), 11 / (ms + 10.0) * 1000)
             for n, ms in ((100, 11.0), (200, 12.0), (300, 19.0))]
    found = static_interval(draws, [([200], [11])], True)
    assert found.predicted[2] == pytest.approx(11 / 0.023)
    assert found.prediction_error_max >= abs(29 / 23 - 1) - 1e-9
    # the same draws on the line are predicted exactly, so only the host mean's sampling error is left (none)
    exact = [StaticDraw([n], [11], 10 + n / 100, steps(n, 1.0), 11 / (20 + n / 100) * 1000) for n in (100, 200, 300)]
    known = static_interval(exact, [([200], [11])], True)
    assert known.half == pytest.approx(0.0, abs=1e-12) and known.estimate == pytest.approx(11 / 0.022)
    # a draw's own steps are held out too: the third ran its steps at 2 ms, so the model fitted without it
    # predicts it at 1 ms a step (11 / 23 ms) and misses its 11 / 39 ms
    slow = [*draws[:2], StaticDraw([300], [11], 19.0, steps(300, 2.0), 11 / 39.0 * 1000)]
    assert static_interval(slow, [([200], [11])], True).predicted[2] == pytest.approx(11 / 0.023)


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
        # once its runs are done the point says so (the `store` stage) while it is summarised and written
        samples = pq.read_table(lognormal_run / "points" / f"p{index:04d}.samples.parquet").to_pylist()
        own = [s for s in samples if s["point_index"] == index]  # the file also closes the point before
        store = [s["t_s"] for s in own if s["phase"] == "store"]
        measured = [s["t_s"] for s in own if s["repeat"] >= 0]  # none when the runs fell between two 20 Hz samples
        assert store and min(store) >= max(measured, default=0.0)
        # and the log says where that time went, part by part
        stored = re.search(rf"point {index} stored in ([0-9.]+) s: summarise ([0-9.]+), release ([0-9.]+), "
                           rf"gc ([0-9.]+), samples ([0-9.]+), write ([0-9.]+)\n", (lognormal_run / "log.txt").read_text())
        assert stored is not None
        total, *parts = map(float, stored.groups())
        assert total == pytest.approx(sum(parts), abs=0.005 * (len(parts) + 1))  # each printed to 0.01 s


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
