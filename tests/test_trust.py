"""Each trust check on hand-made points with hand-checked numbers; the verdict, the working point that passes
over an untrusted point, cost per token and regressions against an earlier run."""
from __future__ import annotations

import pandas as pd
import pytest

from batchscope.analysis import SLO, analyse
from batchscope.analysis.cost import at_working_point, parse_price, with_cost
from batchscope.analysis.regression import compare, config, earlier_matches
from batchscope.analysis.trust import (RULES, clock_finding, drift_finding, host_finding, interval_finding,
                                       measured_interval_finding, noise_finding, outlier_finding, percentile_finding,
                                       processes_finding, spread_finding, t95, tokens_finding)
from batchscope.analysis.verdicts import Finding, assess, level_of, metric_of
from batchscope.charts import linked_charts
from tests.test_charts import grid_panels, layers_of
from tests.test_knee import POW2, SATURATING, make_points


def test_repeat_spread_thresholds() -> None:
    # (max − min) ÷ median: 20/1000 = 2 % trusted, 100/1000 = 10 % caution, 300/1000 = 30 % untrusted
    assert spread_finding([990, 1000, 1010]).level == "trusted"
    assert spread_finding([950, 1000, 1050]).level == "caution"
    found = spread_finding([850, 1000, 1150])
    assert found.level == "untrusted" and found.sentence == (
        "Its 3 repeats span 30 % of their median (850–1 150 tok/s): the throughput does not repeat.")
    assert spread_finding([1000]).level == "caution"


def test_confidence_interval_uses_students_t() -> None:
    # [990, 1010]: mean 1000, sd 14.142; t(1) = 12.706 → 12.706 × 14.142 / √2 = 127.06 → 12.7 % > 10 %
    found = interval_finding([990, 1010])
    assert found.level == "caution" and "± 12.7 %" in found.sentence
    # [995, 1000, 1005]: sd 5, t(2) = 4.303 → 4.303 × 5 / √3 = 12.42 → 1.2 %
    assert interval_finding([995, 1000, 1005]).level == "trusted" and "± 1.2 %" in interval_finding([995, 1000, 1005]).sentence
    assert t95(2) == 12.706 and t95(31) == 2.042 and t95(100) == 1.96
    assert interval_finding([1000]) is None


def test_a_percentile_needs_requests_beyond_it() -> None:
    # P99 of 40 requests: 0.4 beyond it → untrusted; P95 of 100: 5 → caution; P95 of 400: 20 → trusted
    found = percentile_finding(40, 99, "requests")
    assert found.level == "untrusted" and found.sentence == (
        "P99 rests on 40 requests, 0.4 of them beyond it: it is the largest value seen, not a P99.")
    assert percentile_finding(100, 95, "requests").level == "caution"
    assert percentile_finding(400, 95, "requests").level == "trusted"


def test_outlier_steps_and_warm_up_drift() -> None:
    assert outlier_finding(0, 500).level == "trusted"
    assert outlier_finding(3, 1000).level == "caution"  # 0.3 % of the steps
    assert outlier_finding(20, 1000).level == "untrusted"  # 2 %
    # a reason is a sentence that starts with a word, as the Run page's "level: Reason" cell reads it
    assert outlier_finding(1, 18).sentence == ("Measured steps over 5× the median of like steps: 1 of 18 (a compile, "
                                               "autotune or allocation inside a measured step).")
    # last vs first ÷ median: (1100 − 1000) / 1050 = 9.5 % caution, faster: still warming up
    found = drift_finding([1000, 1050, 1100])
    assert found.level == "caution" and "9.5 % faster" in found.sentence and "warming up" in found.sentence
    assert drift_finding([1200, 1000, 1000]).level == "untrusted"  # 20 % slower
    assert drift_finding([1000, 1010, 1000]).level == "trusted"


def test_tokens_host_clock_and_processes() -> None:
    assert tokens_finding(1024, 1024).level == "trusted"
    assert tokens_finding(1020, 1024).level == "caution"  # −0.4 %
    assert tokens_finding(900, 1000).sentence == ("The engine delivered 900 tokens for 1,000 requested (−10 %): "
                                                  "throughput counts requested tokens.")
    assert host_finding(35.0, 98.0).level == "caution"
    assert host_finding(35.0, 20.0).level == "trusted"  # idle GPU, idle host: waiting for arrivals, not bound
    assert host_finding(95.0, 100.0).level == "trusted"
    assert clock_finding(1980, 1980, "sw_power_cap", 0.003).level == "trusted"
    # a 14 % drop under the power cap with replays 0.3 % apart: power management, not a fault
    steady = clock_finding(1700, 1980, "sw_power_cap", 0.003)
    assert steady.level == "trusted" and "read as power management" in steady.sentence
    # the same drop while the same requests ran 8 % apart: the clock shows in the step times
    assert clock_finding(1700, 1980, "sw_power_cap", 0.08).level == "caution"
    assert clock_finding(1900, 1980, "hw_thermal,sw_power_cap", 0.0).level == "untrusted"
    assert processes_finding(1, 1).level == "trusted" and processes_finding(3, 1).level == "caution"
    assert processes_finding(3, 1).sentence.startswith("Processes that held the GPU during this point: 3, 1 of them")


def test_a_metrics_verdict_is_its_worst_check_with_the_doubtful_reasons_worst_first() -> None:
    found = [Finding("throughput interval", "trusted", "A."), Finding("SM clock", "caution", "B."),
             Finding("outlier steps", "untrusted", "C.")]
    assert level_of(found) == {"level": "untrusted", "reasons": ["C.", "B."]}
    assert level_of(found[:1]) == {"level": "trusted", "reasons": ["A."]}  # all pass: the main check says why
    assert set(RULES) >= {"measurement noise", "throughput interval", "percentile sample", "SM clock"}
    assert [metric_of(c) for c in ("output_tokens_per_s", "ttft_ms_p95", "queue_ms_p99", "mem_peak_allocated",
                                   "gpu_util_pct")] == ["throughput", "ttft_p95", "queue_p99", "memory", None]


def test_the_measured_interval_and_the_replays_noise() -> None:
    point = pd.Series({"output_tokens_per_s": 512.0, "tokens_per_s_interval": 0.031, "interval_method": "model",
                       "target_interval": 0.05, "prediction_error_max": 0.012, "budget_spent": None})
    found = measured_interval_finding(point, 4)
    assert found.level == "trusted" and found.sentence == (
        "Throughput 512 tok/s ± 3.1 % (95 % interval) from a step-time model over many host draws, checked "
        "against 4 measured draws (each within 1.2 % of its prediction).")
    short = measured_interval_finding(pd.Series({**point, "tokens_per_s_interval": 0.081, "interval_method": "draws",
                                                 "budget_spent": "draws"}), 5)
    assert short.level == "caution" and short.sentence.endswith(
        "from 5 draws; the draw budget ran out short of the ± 5 % target.")
    assert measured_interval_finding(pd.Series({**point, "tokens_per_s_interval": 0.4}), 6).level == "untrusted"
    queue = measured_interval_finding(pd.Series({**point, "interval_method": "queue"}), 3)
    assert queue.sentence == ("Throughput 512 tok/s ± 3.1 % (95 % interval) from a slot-queue model of the arrivals "
                              "over many host draws, checked against 3 measured draws (each within 1.2 % of its "
                              "prediction).")
    assert noise_finding(0.004, 2).level == "trusted" and noise_finding(0.3, 2).level == "untrusted"


def points_with_repeats() -> tuple[pd.DataFrame, pd.DataFrame]:
    points = make_points(POW2, SATURATING, e2e_ms_p95=[100, 120, 150, 200, 300, 500, 900, 1700, 3300])
    points["point_index"] = range(len(POW2))
    repeats = [[t * 0.995, t, t * 1.005] for t in SATURATING]
    repeats[5] = [1800, 2200, 2600]  # batch 32: 36 % spread → untrusted
    evidence = pd.DataFrame({"point_index": range(len(POW2)), "requests": [b * 300 for b in POW2],
                             "requested_tokens": [b * 3000 for b in POW2], "generated_tokens": [b * 3000 for b in POW2],
                             "latency_requests": [b * 300 for b in POW2], "latency_gaps": [b * 2700 for b in POW2],
                             "steps": 1000, "repeat_tokens_per_s": repeats})
    return points, evidence


def test_the_working_point_passes_over_an_untrusted_point_and_says_so() -> None:
    points, evidence = points_with_repeats()
    result = analyse(points, None, None, SLO("e2e", 95, 1000), evidence=evidence)
    trust = dict(zip(result.table["x"], result.table["trust"]))
    assert trust[32] == "untrusted" and trust[16] == "trusted"
    assert result.working_point.x == 16
    assert result.working_point.sentence.startswith("Batch 16 is recommended (1 600 tok/s): batch 32 qualifies but "
                                                    "its measurement is untrusted (Throughput: Its 3 repeats span "
                                                    "36.4 %")
    every = evidence.assign(repeat_tokens_per_s=[[1000, 1500, 2000]] * len(POW2))
    alone = analyse(points, None, None, SLO("e2e", 95, 1000), evidence=every)
    assert alone.working_point.x == 32 and "untrusted, and no trusted batch qualifies" in alone.working_point.sentence


def test_assess_leaves_failed_points_unjudged_and_reads_itl_gaps() -> None:
    points = make_points([1, 2], [100, None], status=["ok", "oom"])
    points["point_index"] = [0, 1]
    evidence = pd.DataFrame({"point_index": [0], "requests": [10], "requested_tokens": [50],
                             "generated_tokens": [50], "latency_requests": [10], "latency_gaps": [40], "steps": [5],
                             "repeat_tokens_per_s": [[100, 100]]})
    points["itl_ms_p99"] = [5.0, None]
    judged = assess(points, evidence, ["throughput", "itl_p99"])
    assert pd.isna(judged["trust"].tolist()[1])
    # ITL P99 over 50 − 10 = 40 gaps: 0.4 beyond → untrusted; the throughput's repeats agree
    assert judged["trust"].tolist()[0] == "untrusted" and "40 inter-token gaps" in judged["trust_sentence"][0]
    assert judged["trust_throughput"].tolist()[0] == "trusted" and judged["trust_itl_p99"].tolist()[0] == "untrusted"


def steady_batch_one() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Batch 1 measured until known (3 draws, a replay 0.6 % apart, ± 0.8 %) whose P95 rests on 3 requests,
    and batch 8 with 400 requests."""
    points = make_points([1, 8], [100.0, 700.0], ttft_ms_p95=[20.0, 40.0], e2e_ms_p95=[300.0, 500.0],
                         draws=[3, 3], replays=[1, 1], replay_spread=[0.006, 0.004],
                         tokens_per_s_interval=[0.008, 0.02], interval_method="model", target_interval=0.05)
    points["point_index"] = [0, 1]
    evidence = pd.DataFrame({"point_index": [0, 1], "requests": [3, 400], "requested_tokens": [300, 40_000],
                             "generated_tokens": [300, 40_000], "latency_requests": [3, 400],
                             "latency_gaps": [297, 39_600], "steps": [300, 400],
                             "repeat_tokens_per_s": [[100.0, 100.6, 99.8, 100.3], [690.0, 700.0, 705.0, 702.0]]})
    return points, evidence


def test_a_p95_from_3_requests_does_not_demote_throughput_and_is_hollow_only_on_its_own_chart() -> None:
    points, evidence = steady_batch_one()
    result = analyse(points, None, None, None, evidence=evidence)
    first = result.table.iloc[0]
    assert first["trust_metrics"]["throughput"]["level"] == "trusted"
    assert first["trust_metrics"]["ttft_p95"]["level"] == "untrusted"
    assert first["trust_metrics"]["ttft_p95"]["reasons"] == [
        "P95 rests on 3 requests, 0.15 of them beyond it: it is the largest value seen, not a P95."]
    assert first["trust"] == "trusted"  # without an SLO the working point reads throughput alone
    spec = linked_charts(result.table, result)
    panels = grid_panels(spec)

    def drawn(panel: str, series: str) -> list[tuple[float, bool]]:
        """(x, filled) of each point mark of one series, by the filter of the layer that draws it."""
        marks = [layer for layer in layers_of(panels[panel]) if isinstance(layer["mark"], dict)
                 and layer["mark"]["type"] == "point" and "filled" in layer["mark"] and layer.get("transform")]
        found = []
        for layer in marks:
            hollow_only = "=== 'untrusted'" in layer["transform"][0]["filter"]
            rows = spec["datasets"][layer["data"]["name"]]
            found += [(row["x"], not hollow_only) for row in rows if row["series"] == series
                      and (row.get("trust") == "untrusted") == hollow_only]
        return sorted(found)

    assert drawn("throughput", "measured") == [(1.0, True), (8.0, True)]
    assert drawn("latency", "TTFT P95") == [(1.0, False), (8.0, True)]
    with_slo = analyse(points, None, None, SLO("ttft", 95, 1000), evidence=evidence)
    assert with_slo.table["trust"].tolist() == ["untrusted", "trusted"]  # the SLO's P95 is what the rule reads
    assert with_slo.working_point.x == 8


def test_the_report_json_gives_trust_as_an_object_per_metric_with_the_worst_beside_it() -> None:
    points, evidence = steady_batch_one()
    record = analyse(points, None, None, None, evidence=evidence).to_dict()["points"][0]
    assert record["trust"]["throughput"]["level"] == "trusted" and record["trust"]["e2e_p95"]["level"] == "untrusted"
    assert record["trust_worst"] == {"level": "untrusted", "metrics": ["ttft_p95", "e2e_p95"]}
    assert not any(key.startswith("trust_") and key not in ("trust_worst", "trust_working_point", "trust_sentence")
                   for key in record)


def test_cost_per_million_tokens_at_every_point_and_the_working_point() -> None:
    table = pd.DataFrame({"x": [1.0, 8.0], "status": "ok", "output_tokens_per_s": [1000.0, 4000.0],
                          "tensor_parallel": [1, 2], "replicas": [1, 1], "energy_per_output_token_j": [0.5, 0.25]})
    costed = with_cost(table, 3.6)
    # $3.60 × 1 GPU / (1000 tok/s × 3600 s) × 1e6 = $1.00; × 2 GPUs at 4000 tok/s = $0.50
    assert costed["cost_per_mtok"].tolist() == pytest.approx([1.0, 0.5])
    assert costed["output_tokens_per_s_per_gpu"].tolist() == [1000.0, 2000.0]
    marker = type("M", (), {"x": 8.0})()
    assert at_working_point(table, marker, 3.6) == ("At the working point: $0.5 per million output tokens at $3.6 per "
                                                    "GPU-hour × 2 GPUs; 0.25 J per output token (2 000 tok/s per GPU).")
    assert with_cost(table, None)["cost_per_mtok"].isna().all()
    assert parse_price("") is None and parse_price("2.5") == 2.5
    with pytest.raises(ValueError, match="negative"):
        parse_price("-1")


def run_record(run_id: str, created: str, **spec: object) -> dict:
    return {"run_id": run_id, "state": "done", "created_at": pd.Timestamp(created), "gpu_name": "H200",
            "driver": "580", "torch_version": "2.11", "spec": {"model": "llama-3.1-8b", "dtype": "bfloat16",
                                                               "engine": "fast", "mode": "static",
                                                               "prompt_len": "fixed:128", **spec}}


def test_regression_against_the_latest_earlier_run_of_the_same_configuration() -> None:
    runs = [run_record("a", "2026-01-01"), run_record("b", "2026-01-02", dtype="fp8"), run_record("c", "2026-01-03"),
            run_record("d", "2026-01-04", batch_sizes=[1, 2])]  # batch sizes are not configuration
    assert earlier_matches(runs) == {"c": "a", "d": "c"}
    assert config(runs[0])["dtype"] == "bfloat16"
    points, evidence = points_with_repeats()
    before = analyse(points, None, None, None, evidence=evidence)
    slower = points.assign(output_tokens_per_s=points["output_tokens_per_s"] * 0.9,
                           output_tokens_per_s_min=points["output_tokens_per_s_min"] * 0.9,
                           output_tokens_per_s_max=points["output_tokens_per_s_max"] * 0.9)
    after = analyse(slower, None, None, None, evidence=evidence)
    found = compare(runs[2], after, runs[0], before)
    # best: 2500 → 2250 (−10 %), spreads 2475–2525 and 2227.5–2272.5 apart → beyond noise
    assert found.slower and found.best_change == pytest.approx(-0.10)
    assert found.sentences[0].startswith("Best throughput fell 10 %, 2 500 tok/s (2 475–2 525 tok/s) → 2 250 tok/s")
    same = compare(runs[2], before, runs[0], before)
    assert not same.flagged and same.sentences == ["Best throughput held, 2 500 tok/s (2 475–2 525 tok/s) → "
                                                   "2 500 tok/s (2 475–2 525 tok/s), within noise: the repeat spreads "
                                                   "overlap.", "The working point did not move (batch 16)."]
    assert compare(runs[1], before, runs[0], before).differences == ["dtype (bfloat16 vs fp8)"]


def test_a_serving_run_whose_latencies_count_arrivals_in_the_window_is_never_compared_with_an_older_one() -> None:
    window = {"throughput_basis": "load window"}
    older = {**run_record("a", "2026-01-01", mode="continuous"), "env": window}  # made before loaded.counts
    newer = {**run_record("b", "2026-01-02", mode="continuous"),
             "env": {**window, "latency_basis": "arrivals in the load window"}}
    again = {**run_record("c", "2026-01-03", mode="continuous"), "env": newer["env"]}
    assert earlier_matches([older, newer, again]) == {"c": "b"}
    assert config(older)["latency basis"] == "every request"
    assert "latency basis" not in config(run_record("s", "2026-01-04"))  # a static batch counts every request


def test_a_percentile_rests_on_the_requests_it_counts_not_on_every_request() -> None:
    points, evidence = steady_batch_one()
    # batch 8 served 400 requests but its percentiles count the 150 that arrived while loaded
    judged = assess(points, evidence.assign(latency_requests=[3, 150], latency_gaps=[297, 14_850]), ["ttft_p95"])
    assert judged["trust_ttft_p95"].tolist() == ["untrusted", "caution"]
    assert "P95 rests on 150 requests, 7.5 of them beyond it" in judged["trust_sentence"][1]


def test_a_serving_run_rated_over_its_load_window_is_never_compared_with_one_rated_over_the_wall() -> None:
    older = run_record("a", "2026-01-01", mode="continuous")  # made before the window: its env names no basis
    newer = {**run_record("b", "2026-01-02", mode="continuous"), "env": {"throughput_basis": "load window"}}
    again = {**run_record("c", "2026-01-03", mode="continuous"), "env": {"throughput_basis": "load window"}}
    assert earlier_matches([older, newer, again]) == {"c": "b"}
    assert config(older)["throughput basis"] == "wall" and "throughput basis" not in config(run_record("s", "2026-01-04"))
