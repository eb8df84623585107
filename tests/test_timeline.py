"""One point's steps over time: slots, KV cache occupancy and token mix, hand-checked."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from batchscope import timeline
from batchscope.analysis.axis import AXES, BATCH
from batchscope.ui import run_view


def continuous_steps() -> pd.DataFrame:
    return pd.DataFrame({
        "point_index": 0, "repeat": 0, "step_index": range(4), "phase": ["prefill", "mixed", "decode", "decode"],
        "start_ms": [0.0, 10.0, 20.0, 30.0], "duration_ms": 10.0, "active_seqs": [1, 2, 2, 0],
        "active_tokens": [10, 30, 40, 0], "batch_rows": [0, 2, 2, 2], "prefill_tokens": [10, 20, 0, 0],
        "decode_tokens": [0, 1, 2, 2]})


def values(frame: pd.DataFrame, series: str) -> list[float]:
    return frame[frame["series"] == series]["value"].tolist()


def test_continuous_steps_give_slots_kv_percent_and_token_mix() -> None:
    frames, per_value = timeline.timeline_frames(continuous_steps(), kv_capacity_tokens=80)
    assert per_value == 1 and set(frames) == {"slots", "kv", "tokens"}
    assert frames["slots"]["t_s"].unique().tolist() == [0.0, 0.01, 0.02, 0.03]
    assert values(frames["slots"], "requests in a slot") == [1, 2, 2, 0]
    assert values(frames["slots"], "decode width run (bucket)") == [0, 2, 2, 2]
    assert values(frames["kv"], "KV cache occupancy (%)") == [12.5, 37.5, 50.0, 0.0]  # tokens / 80
    assert values(frames["tokens"], "prefill tokens") == [10, 20, 0, 0]
    assert values(frames["tokens"], "decode tokens") == [0, 1, 2, 2]


def test_a_paged_pool_adds_blocks_in_use_and_the_preemptions_so_far() -> None:
    steps = continuous_steps().assign(kv_blocks=[1, 2, 3, 0], preemptions=[0, 1, 0, 2])
    frames, _ = timeline.timeline_frames(steps, kv_capacity_tokens=80, kv_block_size=16)
    assert values(frames["kv"], "KV blocks in use (% of pool)") == [20.0, 40.0, 60.0, 0.0]  # blocks × 16 / 80
    assert values(frames["preemptions"], "requests preempted so far") == [0, 1, 1, 3]
    quiet, _ = timeline.timeline_frames(steps.assign(preemptions=0), kv_capacity_tokens=80, kv_block_size=16)
    assert "preemptions" not in quiet


def test_static_steps_have_no_token_mix_and_kv_in_tokens_without_a_capacity() -> None:
    steps = continuous_steps().assign(prefill_tokens=np.nan, decode_tokens=np.nan)
    frames, _ = timeline.timeline_frames(steps, kv_capacity_tokens=None)
    assert set(frames) == {"slots", "kv"}
    assert values(frames["kv"], "KV tokens held") == [10, 30, 40, 0]


def test_long_timelines_are_averaged_in_equal_runs_of_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeline, "MAX_POINTS", 2)
    frames, per_value = timeline.timeline_frames(continuous_steps(), kv_capacity_tokens=80)
    assert per_value == 2
    assert frames["kv"]["t_s"].tolist() == [0.005, 0.025]
    assert values(frames["kv"], "KV cache occupancy (%)") == [25.0, 25.0]  # (12.5+37.5)/2, (50+0)/2
    assert values(frames["slots"], "requests in a slot") == [1.5, 1.0]


def test_chart_draws_the_limits_it_knows_and_nothing_for_empty_steps() -> None:
    chart = timeline.timeline_chart(continuous_steps(), 80, 4)
    spec = str(chart.to_dict())
    assert "max_num_seqs 4" in spec and "capacity" in spec and "time in the repeat (s)" in spec
    assert len(chart.vconcat) == 4  # slots, KV, then decode and prefill tokens each on its own scale
    titles = [panel.title for panel in chart.vconcat]
    assert titles[2:] == ["decode tokens per step", "prefill tokens per step"]
    panels = timeline.split_tokens(timeline.timeline_frames(continuous_steps(), 80)[0])
    assert panels["decode tokens per step"]["value"].tolist() == [0, 1, 2, 2]  # its own scale, not prefill's 20
    empty = continuous_steps().iloc[0:0]
    assert timeline.timeline_chart(empty, 80, 4) is None


def test_point_choices_follow_the_axis_and_skip_failed_points() -> None:
    table = pd.DataFrame({"point_index": [0, 1, 2], "batch_size": [4, 4, 4], "status": ["ok", "ok", "oom"],
                          "sweep_axis": "arrival_rate", "sweep_value": [8.0, 0.5, 16.0],
                          "kv_capacity_tokens": [256, 256, 256], "max_num_seqs": [4, 4, 4]})
    assert list(run_view.timeline_points(table, AXES["arrival_rate"]).items()) == [
        (1, "arrival rate 0.5 req/s"), (0, "arrival rate 8 req/s")]  # in order along the axis
    assert run_view.timeline_limits(table, 0) == (256.0, 4.0, None)
    static = pd.DataFrame({"point_index": [0], "batch_size": [2], "status": ["ok"]})
    assert run_view.timeline_points(static, BATCH) == {0: "batch 2"}
    assert run_view.timeline_limits(static, 0) == (None, None, None)


def test_replicas_are_listed_only_when_several_engines_stepped() -> None:
    assert run_view.step_replicas(continuous_steps().assign(replica=np.nan)) == []
    assert run_view.step_replicas(continuous_steps().assign(replica=[0, 1, 0, 1])) == [0, 1]


def test_a_repeats_load_window_is_shaded_on_every_panel_where_it_was_recorded() -> None:
    repeats = pd.DataFrame({"point_index": [0, 0, 1], "repeat": [0, 1, 0], "loaded_start_ms": [10.0, 12.0, np.nan],
                            "loaded_end_ms": [25.0, 30.0, np.nan]})
    assert run_view.load_window(repeats, 0, 1) == (12.0, 30.0)
    assert run_view.load_window(repeats, 1, 0) is None  # a static batch, or a load sent at once
    assert run_view.load_window(repeats.drop(columns=["loaded_start_ms", "loaded_end_ms"]), 0, 0) is None
    chart = timeline.timeline_chart(continuous_steps(), 80, 4, window_ms=(10.0, 25.0))
    spec = chart.to_dict()
    bands = [layer for panel in spec["vconcat"] for layer in panel["layer"] if layer["mark"]["type"] == "rect"]
    assert len(bands) == 4 and all(panel["layer"][0]["mark"]["type"] == "rect" for panel in spec["vconcat"])
    assert all(spec["datasets"][band["data"]["name"]] == [{"from_s": 0.01, "to_s": 0.025}] for band in bands)
    assert not any(layer["mark"]["type"] == "rect" for panel in timeline.timeline_chart(continuous_steps(), 80, 4)
                   .to_dict()["vconcat"] for layer in panel["layer"])


def test_the_window_caption_says_which_requests_the_latencies_count_by_the_runs_latency_basis() -> None:
    counted = run_view.latency_words({"latency_basis": "arrivals in the load window"})
    assert "arrived inside it" in counted and "first round" in counted and "left out" in counted
    for older in ({"throughput_basis": "load window"}, None):  # made before runners' loaded.counts
        assert run_view.latency_words(older).startswith("Its latencies count every request")
