"""Plateau, Kneedle and the noise rule on hand-made throughput curves whose knees are known."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from batchscope.analysis import analyse
from batchscope.analysis.curve import ok_curve
from batchscope.analysis.knee import gains_per_doubling, kneedle, plateau

POW2 = [1, 2, 4, 8, 16, 32, 64, 128, 256]
# 1→16 doubles; 16→32 +37.5 %; then +5 %, +6.06 %, +2.04 %: the plateau starts at 32.
SATURATING = [100, 200, 400, 800, 1600, 2200, 2310, 2450, 2500]


def make_points(batches: list[int], tput: list[float | None], spread: float = 0.01,
                status: list[str] | None = None, **columns: list) -> pd.DataFrame:
    """Summary rows: median throughput with a ±spread band, status ok unless given, extra columns as lists."""
    t = np.array([np.nan if v is None else v for v in tput], dtype=float)
    return pd.DataFrame({"run_id": "r1", "batch_size": batches,
                         "status": status or ["ok"] * len(batches),
                         "output_tokens_per_s": t, "output_tokens_per_s_min": t * (1 - spread),
                         "output_tokens_per_s_max": t * (1 + spread), **columns})


def test_gain_is_normalised_per_doubling() -> None:
    curve = ok_curve(make_points([1, 4, 16], [100, 200, 200]))
    # 1→4 is two doublings for 2×: 2 ** (1/2) − 1 = 0.41421; 4→16 flat: 0
    assert gains_per_doubling(curve) == pytest.approx([math.sqrt(2) - 1, 0.0])


def test_clean_saturating_curve() -> None:
    result = analyse(make_points(POW2, SATURATING), None, None)
    assert result.plateau is not None and result.plateau.x == 32
    # 2310 / 2200 − 1 = 0.05 → "5 %"
    assert result.plateau.sentence == ("Doubling past batch 32 adds only 5 % throughput "
                                       "(2 200 tok/s → 2 310 tok/s), so the plateau starts at 32.")
    assert result.kneedle is not None and result.kneedle.x == 32
    # 2200 / 2500 = 88 % of the best
    assert "88 % of the best" in result.kneedle.sentence
    assert result.working_point is not None and result.working_point.x == 32
    assert result.working_point.sentence == "Batch 32 is recommended: throughput plateaus there (2 200 tok/s)."


def test_gain_threshold_is_configurable() -> None:
    # steps after 32 gain 5 %, 6.06 %, 2.04 %: with a 3 % threshold only 128→256 (2.04 %) is flat
    call = plateau(ok_curve(make_points(POW2, SATURATING)), gain=0.03)
    assert call.marker is not None and call.marker.x == 128


def test_noisy_curve_does_not_call_the_knee_inside_overlapping_spreads() -> None:
    points = make_points(POW2, SATURATING)
    # 16: 1600 in [1500, 2250] and 32: 2200 in [2100, 2300] overlap; 8: [792, 808] is apart from 16
    points.loc[4, ["output_tokens_per_s_min", "output_tokens_per_s_max"]] = [1500, 2250]
    points.loc[5, ["output_tokens_per_s_min", "output_tokens_per_s_max"]] = [2100, 2300]
    result = analyse(points, None, None)
    assert result.plateau is None
    assert any(n.startswith("The plateau could not be called between batch 16 and 32: their repeat spreads "
                            "overlap (batch 16: 1 500–2 250 tok/s; batch 32: 2 100–2 300 tok/s)")
               for n in result.notes)
    # the plateau starts at 16 or 32; 32 is the latest, so the working point may go up to it
    assert result.working_point is not None and result.working_point.x == 32
    assert "noise leaves undecided" in result.working_point.sentence


def test_overlap_run_extends_back_over_several_points() -> None:
    points = make_points([8, 16, 32, 64], [800, 1000, 1200, 1250], spread=0.15)
    # ±15 %: 800 [680, 920] vs 1000 [850, 1150] overlap; 1000 vs 1200 [1020, 1380] overlap → 8..32
    call = plateau(ok_curve(points))
    assert call.marker is None and call.limit == 32
    assert call.notes[0].startswith("The plateau could not be called between batch 8 and 32")


def test_monotone_curve_has_no_knee() -> None:
    result = analyse(make_points(POW2, [100 * 2**i for i in range(9)]), None, None)
    assert result.plateau is None and result.kneedle is None
    assert any(n.startswith("No plateau: going from batch 128 to 256 still adds 100 % throughput per doubling")
               for n in result.notes)
    assert any(n.startswith("Kneedle finds no knee") for n in result.notes)
    assert result.working_point is not None and result.working_point.x == 256
    assert "only because it is the largest measured" in result.working_point.sentence


def test_linear_in_log2_curve_has_no_knee() -> None:
    # +100 % then +50 %, 33 %, 25 %, 20 %, 16.7 %, 14.3 %, 12.5 %: every step ≥ 10 %, and a straight line
    result = analyse(make_points(POW2, [100 * (i + 1) for i in range(9)]), None, None)
    assert result.plateau is None and result.kneedle is None


def test_oom_tail_is_shown_but_not_fitted() -> None:
    points = make_points(POW2 + [512], SATURATING[:8] + [None, None], status=["ok"] * 8 + ["oom", "oom"])
    result = analyse(points, None, None)
    assert result.plateau is not None and result.plateau.x == 32
    assert result.kneedle is not None and result.kneedle.x == 32
    assert "Batch 256 ran out of memory; it is shown but excluded from the fits." in result.notes
    assert list(result.table["batch_size"]) == POW2 + [512]


def test_oom_before_the_plateau_leaves_it_uncalled() -> None:
    points = make_points([1, 2, 4, 8], [100, 200, 400, None], status=["ok", "ok", "ok", "oom"])
    result = analyse(points, None, None)
    assert result.plateau is None
    assert "Batch 8 ran out of memory; it is shown but excluded from the fits." in result.notes
    assert result.working_point is not None and result.working_point.x == 4


def test_two_slope_curve_kneedle_picks_the_first_bend_plateau_the_last() -> None:
    # gains: 100 % ×3, then 8.75 %, 8.05 % (a shelf), then 38.3 %, 30.8 % (second rise), then 4.7 %, 2.25 %
    tput = [100, 200, 400, 800, 870, 940, 1300, 1700, 1780, 1820]
    result = analyse(make_points(POW2 + [512], tput), None, None)
    assert result.kneedle is not None and result.kneedle.x == 8
    assert result.plateau is not None and result.plateau.x == 128
    assert result.working_point is not None and result.working_point.x == 128


def test_non_doubling_grid_uses_gain_per_doubling() -> None:
    # 16→64 is +15 % raw but two doublings: 1.15 ** 0.5 − 1 = 7.24 % < 10 %, so the plateau is 16
    call = plateau(ok_curve(make_points([1, 4, 16, 64], [100, 400, 1000, 1150])))
    assert call.marker is not None and call.marker.x == 16
    assert call.marker.sentence == ("Past batch 16 throughput adds only 7.2 % per doubling (1 000 tok/s at 16 → "
                                    "1 150 tok/s at 64), so the plateau starts at 16.")


def test_falling_throughput_after_the_plateau() -> None:
    call = plateau(ok_curve(make_points([1, 2, 4, 8], [100, 200, 190, 180])))
    # 200 → 190 is −5 %
    assert call.marker is not None and call.marker.x == 2
    assert "loses 5 % throughput" in call.marker.sentence


def test_kneedle_needs_three_points() -> None:
    assert kneedle(ok_curve(make_points([1, 2], [100, 150]))) is None


def test_mixed_runs_are_refused() -> None:
    with pytest.raises(ValueError, match="more than once"):
        ok_curve(make_points([1, 2, 2], [1, 2, 3]))


def test_a_gain_just_over_the_threshold_is_not_rounded_onto_it() -> None:
    # 1104 / 1000 − 1 = 10.4 % ≥ 10 %: no plateau, and the note must not print "10 %"
    call = plateau(ok_curve(make_points([1, 2, 4, 8], [100, 200, 1000, 1104])))
    assert call.marker is None
    assert "still adds 10.4 % throughput per doubling" in call.notes[0]


def test_kneedle_is_not_fooled_by_an_early_dip():
    # 31, 30, 53, 134, 286, 536, 743, 1548, 1481 tok/s (hf-generate's real shape): y[0] > y[1] made
    # kneed's normalised difference positive at batch 1. On the raw chord from (0, 31) to (8, 1481),
    # batch 1 is an endpoint and only batch 128 lies above it (chord at log2 = 7: 31 + 1450·7/8 ≈ 1300
    # < 1548), so the knee is 128, never 1.
    curve = make_points([1, 2, 4, 8, 16, 32, 64, 128, 256], [31, 30, 53, 134, 286, 536, 743, 1548, 1481])
    assert analyse(curve, None, None).kneedle.x == 128


def test_a_curve_still_rising_into_an_oom_names_the_oom_instead_of_asking_for_larger_batches() -> None:
    rising = make_points([1, 2, 4, 8, 16], [100, 200, 400, 760, None], status=["ok"] * 4 + ["oom"])
    result = analyse(rising, None, None)
    text = " ".join([result.working_point.sentence, *result.notes])
    assert "larger batches" not in text and "may still help" not in text
    assert "but batch 16 ran out of memory, so 8 is as far as this device goes" in text
    assert result.working_point.sentence.startswith("Batch 8 is recommended: it is the largest that fits in memory")
    still = analyse(make_points([1, 2, 4, 8], [100, 200, 400, 760]), None, None)  # no OOM: the advice stays
    assert "so try larger batches" in still.working_point.sentence


def test_a_one_point_run_does_not_say_throughput_is_still_rising() -> None:
    result = analyse(make_points([1], [540]), None, None)
    text = " ".join([result.working_point.sentence, *result.notes])
    assert "still rising" not in text and "try larger" not in text
    assert result.working_point.sentence.startswith("Batch 1 is the only batch that finished (540 tok/s)")
