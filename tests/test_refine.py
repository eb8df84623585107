"""Adaptive refinement's rule on hand-made curves: which value comes next, when it stops, along every axis,
and that the runner's stdlib rule agrees with the app's knee and SLO rules on the same curves."""
from __future__ import annotations

import pytest

from batchscope.analysis import SLO
from batchscope.analysis.curve import ok_curve
from batchscope.analysis.knee import plateau
from batchscope.analysis.slo import slo_limit
from runners.spec import problems, validate
from runners.spec.continuous import ContinuousPoint
from runners.spec.refine import (PLATEAU_GAIN, Proposal, Seen, at, brackets, midpoint, next_point, parse_target,
                                 plateau_index, slo_index)
from runners.spec.slo import SLO as Target
from runners.spec.static import StaticPoint
from tests.test_knee import POW2, SATURATING, make_points
from tests.test_slo import E2E_P95

E2E_1S = Target("e2e", 95, 1000.0)


def seen(xs: list[float], tput: list[float], latency: list[float] | None = None) -> list[Seen]:
    return [Seen(x, True, t, None if latency is None else lat) for x, t, lat in
            zip(xs, tput, latency or [None] * len(xs))]


def test_the_target_reads_as_the_app_writes_an_slo() -> None:
    assert parse_target("ttft:95:1000") == Target("ttft", 95, 1000.0)
    assert parse_target("e2e:99:250.5").column == "e2e_ms_p99"
    for bad, words in (("ttft:95", "METRIC:PERCENTILE:MS"), ("tpot:95:10", "one of"), ("ttft:90:10", "50, 95 or 99"),
                       ("ttft:95:-1", "positive"), ("ttft:95:soon", "milliseconds")):
        with pytest.raises(ValueError, match=words):
            parse_target(bad)


def test_the_slo_bracket_comes_first_and_is_halved() -> None:
    # E2E P95 900 ms at 64 meets 1 s, 1 700 ms at 128 breaks it; the plateau of SATURATING starts at 32
    points = seen(POW2, SATURATING, E2E_P95)
    assert brackets(points, E2E_1S) == [("slo", 64, 128), ("knee", 16, 32)]
    assert next_point(points, E2E_1S, 0.05, whole=True) == Proposal(96, "slo", 64, 128)
    # without an SLO only the knee is refined: between 16 (before the plateau) and 32 (its start)
    assert next_point(points, None, 0.05, whole=True) == Proposal(24, "knee", 16, 32)


def test_refining_a_linear_latency_finds_the_dense_limit_in_four_points() -> None:
    """TTFT = 10 ms × batch against a 170 ms SLO: the limit is 17. From powers of two the bracket is
    16–32: 24 (240 ms) breaks, 20 breaks, 18 breaks, 17 (170 ms) meets, and 17–18 are neighbours."""
    target = Target("ttft", 95, 170.0)
    throughput = {b: 100.0 * b for b in range(1, 65)}  # linear: never a plateau
    points = [Seen(b, True, throughput[b], 10.0 * b) for b in (1, 2, 4, 8, 16, 32, 64)]
    added = []
    while (proposal := next_point(points, target, 0.05, whole=True)) is not None:
        added.append(proposal.x)
        points.append(Seen(proposal.x, True, throughput[int(proposal.x)], 10.0 * proposal.x))
    assert added == [24, 20, 18, 17]
    dense = [Seen(b, True, throughput[b], 10.0 * b) for b in range(1, 65)]
    ordered = sorted(points, key=lambda s: s.x)
    assert ordered[slo_index(ordered, target)].x == dense[slo_index(dense, target)].x == 17


def test_an_arrival_rate_is_halved_geometrically_until_within_the_tolerance() -> None:
    # 2 req/s meets, 8 req/s breaks: √16 = 4; then √(4·8) = 5.66 (three digits); then 4.76, 5.19 ...
    target = Target("ttft", 95, 500.0)
    latency = {2.0: 100.0, 8.0: 2000.0}
    points = [Seen(r, True, 50.0 * r, latency[r]) for r in (2.0, 8.0)]
    assert next_point(points, target, 0.05, whole=False) == Proposal(4.0, "slo", 2.0, 8.0)
    points.append(Seen(4.0, True, 200.0, 300.0))  # meets
    assert next_point(points, target, 0.05, whole=False).x == 5.66
    assert midpoint(4.0, 5.66, whole=False) == 4.76
    # 5.4 / 5.2 = 1.038: within 5 %, done
    done = [Seen(5.2, True, 260.0, 480.0), Seen(5.4, True, 270.0, 520.0)]
    assert next_point(done, target, 0.05, whole=False) is None
    assert next_point(done, target, 0.01, whole=False).x == 5.3  # √(5.2·5.4) = 5.299 → 5.3


def test_where_latency_falls_the_slo_bracket_ends_at_the_smallest_value_that_meets_it() -> None:
    # max_num_seqs at 4 req/s: more slots queue less; 600 ms at 8 breaks a 500 ms P95 TTFT, 300 ms at 16 meets it
    target = Target("ttft", 95, 500.0)
    latency = {1: 9000.0, 2: 4000.0, 4: 1500.0, 8: 600.0, 16: 300.0, 32: 250.0}
    points = [Seen(m, True, 1000.0, ms) for m, ms in latency.items()]  # flat throughput: no knee to refine
    assert brackets(points, target) == [("slo", 8, 16)]
    assert next_point(points, target, 0.05, whole=True) == Proposal(12, "slo", 8, 16)
    points.append(Seen(12, True, 1000.0, 450.0))  # meets: the bracket is now 8–12
    assert next_point(points, target, 0.05, whole=True) == Proposal(10, "slo", 8, 12)


def test_a_failed_midpoint_or_neighbours_end_a_bracket() -> None:
    target = Target("ttft", 95, 100.0)
    points = [Seen(4, True, 400.0, 50.0), Seen(8, True, 800.0, 150.0), Seen(6, False)]  # 6 ran out of memory
    assert brackets(points, target) == [("slo", 4, 8)]
    assert next_point(points, target, 0.05, whole=True) is None
    assert next_point([Seen(4, True, 400.0, 50.0), Seen(5, True, 500.0, 150.0)], target, 0.05, whole=True) is None
    assert midpoint(4, 5, whole=True) is None and midpoint(4, 7, whole=True) == 5


def test_no_bracket_when_every_point_meets_none_meets_or_throughput_still_rises() -> None:
    rising = [100.0 * b for b in POW2]
    assert brackets(seen(POW2, rising, [1.0] * len(POW2)), E2E_1S) == []  # all meet, no plateau
    assert brackets(seen(POW2, rising, [5000.0] * len(POW2)), E2E_1S) == []  # none meets
    flat = [1000.0] * len(POW2)
    assert plateau_index(seen(POW2, flat)) == 0 and brackets(seen(POW2, flat), None) == []  # plateau from 1


@pytest.mark.parametrize("tput, latency, ms", [
    (SATURATING, E2E_P95, 1000.0),  # SLO limit 64, plateau 32
    (SATURATING, E2E_P95, 250.0),  # SLO limit 8
    ([100 * b for b in POW2], E2E_P95, 50.0),  # nothing meets; throughput never flattens
    ([1000.0] * 9, E2E_P95, 5000.0),  # flat from the start; everything meets
    ([100, 180, 300, 420, 470, 490, 560, 565, 566], [10, 20, 40, 80, 160, 150, 300, 600, 1200], 155.0),  # dips
    (SATURATING, [2.5, 1.6, 1.5, 1.4, 570, 560, 555, 550, 507], 127.0),  # a cliff between flats that dip: 8
    ([200, 380, 700, 1000, 1010, 1012, 1013, 1013, 1014], [9000, 4000, 1500, 600, 300, 250, 240, 230, 220],
     500.0),  # latency falls (max_num_seqs at a fixed rate): the smallest that meets, 16
])
def test_the_runner_rule_agrees_with_the_apps_knee_and_slo(tput: list[float], latency: list[float],
                                                            ms: float) -> None:
    """The app's plateau `limit` (its marker's x, or the latest start noise allows) and SLO limit are the
    runner's, on the same curve, so refinement narrows where the page then draws its markers."""
    points = make_points(POW2, tput, e2e_ms_p95=latency)
    curve = ok_curve(points)
    app_plateau = plateau(curve, PLATEAU_GAIN).limit
    app_slo = slo_limit(curve, SLO("e2e", 95, ms)).marker
    ours = seen(POW2, tput, latency)
    start, limit = plateau_index(ours), slo_index(ours, Target("e2e", 95, ms))
    assert (None if start is None else ours[start].x) == app_plateau
    assert (None if limit is None else ours[limit].x) == (None if app_slo is None else app_slo.x)


def test_an_added_point_keeps_its_modes_settings_and_is_marked() -> None:
    assert at(StaticPoint(16), 24, "slo") == StaticPoint(24, added_for="slo")
    seqs = ContinuousPoint(8, 4.0, None, "max_num_seqs")
    assert at(seqs, 12.0, "knee") == ContinuousPoint(12, 4.0, None, "max_num_seqs", added_for="knee")
    clients = ContinuousPoint(16, None, 4, "concurrency")
    added = at(clients, 6, "slo")
    assert (added.concurrency, added.batch_size, added.max_num_seqs, added.label) == (6, 6, 16, "concurrency 6")
    rates = ContinuousPoint(64, 2.0, None, "arrival_rate")
    assert at(rates, 5.66, "slo").arrival_rate == 5.66 and at(rates, 5.66, "slo").value == 5.66


def test_refinement_options_are_checked_beside_their_fields() -> None:
    spec = validate({"model": "tiny", "refine_points": "4", "refine_slo": "ttft:95:1000", "refine_tolerance": 0.1})
    assert (spec.refine_points, spec.refine_slo, spec.refine_tolerance) == (4, "ttft:95:1000", 0.1)
    assert validate({"model": "tiny"}).refine_points == 0  # off unless asked for
    found = problems({"model": "tiny", "refine_points": -1, "refine_slo": "ttft:90:5", "refine_tolerance": 2})
    assert found["refine_points"] == "refine_points must be ≥ 0, got -1"
    assert "50, 95 or 99" in found["refine_slo"]
    assert found["refine_tolerance"] == "refine_tolerance must be at most 1, got 2"
    assert problems({"model": "tiny", "refine_tolerance": []})["refine_tolerance"] == "not a number: []"
