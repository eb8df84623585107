"""SLO limit and working point: every point meets, none meets, the SLO cuts before the plateau."""
from __future__ import annotations

import pytest

from batchscope.analysis import SLO, analyse
from tests.test_knee import POW2, SATURATING, make_points

# P95 E2E per batch; the plateau of SATURATING is at 32 (500 ms)
E2E_P95 = [100, 120, 150, 200, 300, 500, 900, 1700, 3300]


def saturating_with_latency():
    return make_points(POW2, SATURATING, e2e_ms_p95=E2E_P95, ttft_ms_p99=[10 * b for b in POW2])


def test_slo_reads_the_chosen_column() -> None:
    assert SLO("ttft", 99, 250).column == "ttft_ms_p99"
    assert SLO("itl", 50, 20).name == "P50 ITL"


@pytest.mark.parametrize("bad", [dict(metric="tpot", percentile=95, ms=1), dict(metric="e2e", percentile=90, ms=1),
                                 dict(metric="e2e", percentile=95, ms=0)])
def test_bad_slo_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        SLO(**bad)


def test_slo_beyond_the_plateau_keeps_the_plateau() -> None:
    result = analyse(saturating_with_latency(), None, None, SLO("e2e", 95, 1000))
    # 64 takes 900 ≤ 1000, 128 takes 1700 > 1000
    assert result.slo_limit is not None and result.slo_limit.x == 64
    assert result.slo_limit.sentence == ("Batch 64 is the largest whose P95 E2E latency (900 ms) meets the "
                                         "1 000 ms SLO; batch 128 takes 1 700 ms (latency grows along batch).")
    assert result.working_point is not None and result.working_point.x == 32
    assert result.working_point.sentence == ("Batch 32 is recommended: throughput plateaus there (2 200 tok/s) and "
                                             "its P95 E2E latency (500 ms) meets the 1 000 ms SLO.")


def test_slo_before_the_plateau_sets_the_working_point() -> None:
    result = analyse(saturating_with_latency(), None, None, SLO("e2e", 95, 400))
    # 16 takes 300 ≤ 400; the plateau batch 32 takes 500
    assert result.slo_limit.x == 16
    assert result.working_point.x == 16
    assert "the plateau at 32 would take 500 ms" in result.working_point.sentence


def test_slo_every_point_meets() -> None:
    result = analyse(saturating_with_latency(), None, None, SLO("e2e", 95, 5000))
    assert result.slo_limit.x == 256
    assert result.slo_limit.sentence.startswith("Every measured batch meets the 5 000 ms P95 E2E SLO")
    assert result.working_point.x == 32


def test_slo_none_meets() -> None:
    result = analyse(saturating_with_latency(), None, None, SLO("e2e", 95, 50))
    assert result.slo_limit is None and result.working_point is None
    assert ("No batch meets the 50 ms P95 E2E SLO (latency grows along batch): even the smallest, batch 1, takes "
            "100 ms.") in result.notes
    assert any(n.startswith("No working point") for n in result.notes)


def test_slo_on_another_percentile() -> None:
    # TTFT P99 = 10 × batch: ≤ 100 ms up to batch 8
    result = analyse(saturating_with_latency(), None, None, SLO("ttft", 99, 100))
    assert result.slo_limit.x == 8 and result.working_point.x == 8


def test_no_plateau_working_point_is_largest_within_slo() -> None:
    points = make_points(POW2, [100 * 2**i for i in range(9)], e2e_ms_p95=E2E_P95)
    result = analyse(points, None, None, SLO("e2e", 95, 1000))
    assert result.plateau is None and result.working_point.x == 64
    assert "throughput has not plateaued" in result.working_point.sentence


def test_oom_points_never_meet_the_slo() -> None:
    points = make_points([1, 2, 4], [100, 200, None], status=["ok", "ok", "oom"], e2e_ms_p95=[10, 20, None])
    result = analyse(points, None, None, SLO("e2e", 95, 1000))
    assert result.slo_limit.x == 2


def test_non_monotone_latency_is_flagged() -> None:
    points = make_points([1, 2, 4], [100, 200, 400], e2e_ms_p95=[10, 90, 40])
    result = analyse(points, None, None, SLO("e2e", 95, 50))
    assert result.slo_limit.x == 4
    assert any(n.startswith("Smaller batch(es) 2 miss the SLO although batch 4 meets it") for n in result.notes)


def test_a_cliff_between_two_noisy_flats_grows_and_the_limit_is_the_last_point_before_it() -> None:
    # test_refine_sweep's dense sweep made beside six busy loops (3 slots, closed loop of 3…6 clients), the shape a
    # CI run failed on: the median TTFT dips by noise from 3 to 4 clients and from 5 to 6, and jumps by a round
    # between 4 and 5; two dips outnumber one jump
    clients = [3, 4, 5, 6]
    points = make_points(clients, [3477, 3260, 2587, 3160], ttft_ms_p50=[2.5, 1.6, 569.6, 506.7],
                         sweep_axis="concurrency", sweep_value=[float(c) for c in clients])
    result = analyse(points, None, None, SLO("ttft", 50, 127))
    assert result.slo_limit.x == 4 and result.slo_limit.sentence.endswith(
        "concurrency 5 takes 570 ms (latency grows along concurrency).")
    assert not any("latency is not monotone" in note for note in result.notes)


def test_along_max_num_seqs_at_a_fixed_rate_latency_falls_and_the_working_point_is_found() -> None:
    # 4 req/s offered: more slots queue less, so P95 TTFT falls; throughput rises until the slots carry the
    # load, then holds (8 → 16 adds 1 %: the plateau starts at 8)
    seqs = [1, 2, 4, 8, 16, 32]
    points = make_points(seqs, [200, 380, 700, 1000, 1010, 1012], ttft_ms_p95=[9000, 4000, 1500, 600, 300, 250],
                         sweep_axis="max_num_seqs", sweep_value=[float(v) for v in seqs], arrival_rate=4.0)
    result = analyse(points, None, None, SLO("ttft", 95, 500))
    assert result.slo_limit.x == 16 and result.slo_limit.sentence == (
        "max_num_seqs 16 is the smallest whose P95 TTFT latency (300 ms) meets the 500 ms SLO; max_num_seqs 8 "
        "takes 600 ms (latency falls along max_num_seqs).")
    assert result.working_point is not None and result.working_point.x == 16
    assert result.working_point.sentence == (
        "max_num_seqs 16 is recommended: latency falls along max_num_seqs here, so it is the smallest max_num_seqs "
        "at or past the plateau's start (8) whose P95 TTFT latency (300 ms) meets the 500 ms SLO (1 010 tok/s).")
    # no plateau within the SLO's reach: the largest that meets it
    rising = points.assign(output_tokens_per_s=[200, 380, 700, 1000, 1500, 2200])
    assert analyse(rising, None, None, SLO("ttft", 95, 500)).working_point.x == 32
