"""The Explain story: every sentence builder on hand-made tables, the page's choices, and the page itself
through AppTest with the shipped demo runs and with a tiny CPU run made by the real runner."""
from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from batchscope.analysis import SLO, Analysis, Marker, analyse, memory_split
from batchscope.explain.engines import contrast
from batchscope.explain.latency import latency_sentences
from batchscope.explain.memory import memory_sentences
from batchscope.explain.roofline import roofline_sentences
from batchscope.explain.throughput import dip, throughput_sentences, throughput_title
from batchscope.explain.utilisation import utilisation_sentences
from batchscope.explain.walk import explain_steps
from batchscope.explain.words import measured
from batchscope.explain.working_point import working_point_sentences
from batchscope.ingest import ingest_run
from batchscope.store import Store
from batchscope.ui import explain_view, history_view, slo_control
from batchscope.ui.run_view import load_run
from batchscope.units import GiB
from tests.runner_helpers import REPO
from tests.test_pages import app, home, manager, no_traceback, texts  # noqa: F401 (fixtures)

DEMO = REPO / "data" / "demo"


def points(**columns: list) -> pd.DataFrame:
    """An ok point per batch size 1, 2, 4, ... with the given columns (status may be overridden)."""
    n = len(next(iter(columns.values())))
    frame = pd.DataFrame({"batch_size": [2**i for i in range(n)], "status": ["ok"] * n})
    return frame.assign(**columns)


def analysis(table: pd.DataFrame, plateau: int | None = None, slo_limit: int | None = None,
             working_point: int | None = None, ridge: float | None = None, slo: SLO | None = None) -> Analysis:
    marker = (lambda b, label: Marker(b, label, "") if b is not None else None)
    return Analysis(table, marker(plateau, "plateau"), None, marker(slo_limit, "SLO limit"),
                    marker(working_point, "working point"), ridge, slo=slo)


# ---- step 1: throughput ----

def test_throughput_gain_ratio_and_diminishing_doublings() -> None:
    table = points(output_tokens_per_s=[100.0, 250.0, 400.0])
    first, second = throughput_sentences(table, analysis(table))
    assert first == ("Throughput rises from 100 tok/s at batch 1 to 400 tok/s at batch 4: "
                     "4.0× the throughput for a 4× larger batch.")
    assert second == ("Each doubling pays less: the first step (1 → 2) added 150 % per doubling, "
                      "the last (2 → 4) only 60 %.")


def test_throughput_names_the_plateau_and_the_decline_after_a_peak() -> None:
    flat = points(output_tokens_per_s=[100.0, 300.0, 310.0])
    assert "Past batch 2 it plateaus: going on to batch 4 adds only 3.3 % per doubling" in \
        throughput_sentences(flat, analysis(flat, plateau=2))[1]
    peaked = points(output_tokens_per_s=[100.0, 400.0, 300.0])
    assert throughput_sentences(peaked, analysis(peaked))[1] == \
        "Past its peak at batch 2 it falls: batch 4 gives 300 tok/s, 25 % less."
    padded = peaked.assign(decode_padding_waste=[0.0, 0.2, 0.67], prefill_padding_waste=[0.0, 0.5, 0.05])
    assert throughput_sentences(padded, analysis(padded))[1] == (
        "Past its peak at batch 2 it falls: batch 4 gives 300 tok/s, 25 % less; there 67 % of the decode rows "
        "it runs belong to requests already finished.")  # 5 % of prefill padding is below the 10 % worth naming


def test_throughput_still_rising_and_changing_the_run_changes_the_sentence() -> None:
    rising = points(output_tokens_per_s=[100.0, 110.0, 800.0])
    first, second = throughput_sentences(rising, analysis(rising))
    assert "8.0× the throughput" in first
    assert second.startswith("It has not flattened yet: the last step (2 → 4) still added 627.3 % per doubling")
    other = points(output_tokens_per_s=[100.0, 250.0, 400.0])
    assert throughput_sentences(other, analysis(other)) != (first, second)


def test_throughput_title_says_what_the_curve_does() -> None:
    title = throughput_title
    peaked = points(output_tokens_per_s=[100.0, 400.0, 300.0])
    assert title(peaked, analysis(peaked)) == "Throughput peaks at batch 2, then falls"
    rising = points(output_tokens_per_s=[100.0, 250.0, 400.0])
    assert title(rising, analysis(rising)) == "Throughput still rising at the largest batch measured, 4"
    capped = points(output_tokens_per_s=[100.0, 250.0, 400.0, float("nan")], status=["ok", "ok", "ok", "oom"])
    assert title(capped, analysis(capped)) == "Throughput still rising at batch 4, the largest that fit in memory"
    flat = points(output_tokens_per_s=[100.0, 300.0, 310.0])
    assert title(flat, analysis(flat, plateau=2)) == "Throughput plateaus past batch 2"
    assert title(points(output_tokens_per_s=[5.0]), None) == "Throughput at batch 1: one point, no curve yet"
    falling = points(output_tokens_per_s=[300.0, 200.0])
    assert title(falling, analysis(falling)).startswith("Throughput is highest at the smallest batch, 1")


def test_a_fall_inside_the_repeats_spread_is_no_fall() -> None:
    """Median 1 000 → 800 (20 %, over the 10 % a doubling must add) but the repeats overlap: by the noise
    rule that is no fall, so neither the title nor the sentence calls it one; the plateau rule (batch 2,
    the step into it resolved) names where it stops."""
    table = points(output_tokens_per_s=[500.0, 1000.0, 800.0], output_tokens_per_s_min=[490.0, 900.0, 700.0],
                   output_tokens_per_s_max=[510.0, 1100.0, 950.0], decode_step_ms=[5.0, 6.0, 12.0])
    call = analysis(table)
    assert throughput_title(table, call) == "Throughput plateaus past batch 2"
    assert throughput_sentences(table, call)[1] == (
        "Past batch 2 it plateaus: batch 4 gives 800 tok/s, against 1 000 tok/s at batch 2: no change beyond the "
        "repeats' noise (batch 2: 900–1 100 tok/s; batch 4: 700–950 tok/s); a decode step went from 6 ms at "
        "batch 2 to 12 ms at batch 4, 2.0× for 2.0× the rows.")
    apart = table.assign(output_tokens_per_s_min=[490.0, 950.0, 700.0], output_tokens_per_s_max=[510.0, 1100.0, 900.0])
    assert throughput_title(apart, call) == "Throughput peaks at batch 2, then falls"  # 700–900 vs 950–1 100


def test_when_the_noise_hides_where_the_plateau_starts_the_title_says_where_it_levels_off() -> None:
    """The 8B chat run's shape by hand: 1 → 4 resolved, 4 → 8 → 16 overlapping (the plateau rule cannot
    call it and leaves the working point up to 16), 16 → 32 adds 8.6 % (< 10 %), 32 → 64 lower, all
    overlapping batch 16's repeats: it levels off by 16, with no peak or fall claimed."""
    table = points(output_tokens_per_s=[200.0, 300.0, 500.0, 650.0, 1000.0, 1086.0, 875.0],
                   output_tokens_per_s_min=[199.0, 250.0, 450.0, 480.0, 790.0, 950.0, 720.0],
                   output_tokens_per_s_max=[201.0, 340.0, 585.0, 917.0, 1190.0, 1360.0, 1160.0])
    call = analysis(table)
    assert throughput_title(table, call) == "Throughput levels off by batch 16"
    first, second = throughput_sentences(table, call)
    assert first == "Throughput rises from 200 tok/s at batch 1 to 1 000 tok/s at batch 16: 5.0× the throughput " \
                    "for a 16× larger batch."
    assert second.startswith("By batch 16 it levels off: batch 32 gives 1 086 tok/s and batch 64 gives 875 tok/s, "
                             "against 1 000 tok/s at batch 16: no change beyond the repeats' noise, which also hides "
                             "where from batch 4 to 16 the plateau starts (batch 4: 450–585 tok/s; ")


def test_a_dip_that_recovers_is_named() -> None:
    table = points(output_tokens_per_s=[100.0, 400.0, 300.0, 350.0, 500.0])
    assert throughput_title(table, analysis(table)).endswith(", after a dip")
    assert throughput_sentences(table, analysis(table))[1].endswith(
        "; on the way it dips from 400 tok/s at batch 2 to 300 tok/s at batch 4 (25 % less) before batch 16 "
        "recovers to 500 tok/s.")
    assert dip(points(output_tokens_per_s=[100.0, 400.0, 300.0])) is None  # a final fall is no dip


def test_latency_says_how_few_requests_a_tied_percentile_rests_on_and_names_outliers() -> None:
    table = points(ttft_ms_p95=[10.0, 50.0, 90.0], ttft_ms_p99=[12.0, 50.0, 90.0], repeats=[3, 3, 3],
                   itl_ms_p95=[5.0, 6.0, 7.0], outlier_steps=[0, 2, 0]).assign(batch_size=[1, 16, 64])
    first, second = latency_sentences(table, 95, {"spec": {"mode": "static"}})
    assert first.endswith("; P95 and P99 TTFT are the same at batch 16, 64: at batch 16 they rest on 48 requests "
                          "(16 × 3 repeats), and P99 of 48 requests is simply the slowest one.")
    assert second.endswith("; 2 at batch 16 measured decode step(s) took over 5× the median of like steps (a compile, "
                           "autotune or allocation), which the tail of its ITL includes.")
    only_large = table[table["batch_size"] == 64]
    assert "rest on 192 requests (64 × 3 repeats), and even with 192 requests, the rows of one static batch share " \
           "one prefill" in latency_sentences(only_large, 95, {})[0]
    online = latency_sentences(table, 95, {"spec": {"mode": "continuous", "num_requests": 20}})[0]
    assert "at batch 16 they rest on 60 requests (3 repeats), and P99 of 60 requests is simply the slowest" in online
    assert "P99" not in latency_sentences(table, 95, {"spec": {"mode": "continuous", "num_requests": 40}})[0]
    assert "P99" not in latency_sentences(table.assign(ttft_ms_p99=[11.0, 60.0, 95.0]), 95, {})[0]


def test_throughput_without_a_curve_says_what_is_missing() -> None:
    oom = points(output_tokens_per_s=[float("nan")], status=["oom"])
    assert throughput_sentences(oom, analysis(oom)) == (
        "No batch size finished with a throughput measurement, so there is no curve to explain yet.",
        "Batch 1 ran out of memory.")
    one = points(output_tokens_per_s=[52.3])
    assert throughput_sentences(one, analysis(one))[0] == \
        "Only batch 1 finished (52.3 tok/s), so there is no rise to compare yet."
    assert throughput_sentences(pd.DataFrame(), None)[1] == "No point has been measured yet."


# ---- step 2: latency ----

def test_latency_ttft_growth_and_per_user_token_rate() -> None:
    table = points(ttft_ms_p95=[100.0, 400.0, 1600.0], itl_ms_p95=[10.0, 20.0, 40.0])
    first, second = latency_sentences(table)
    assert first.startswith("P95 time to first token (TTFT) grows from 100 ms at batch 1 to 1 600 ms at batch 4 (16×)")
    assert second == ("P95 inter-token latency (ITL) grows from 10 ms at batch 1 to 40 ms at batch 4, so each "
                      "user's stream goes from about 100 to 25 tokens/s (1000 / ITL).")


def test_latency_follows_the_chosen_percentile() -> None:
    table = points(ttft_ms_p95=[100.0, 400.0, 1600.0], itl_ms_p95=[10.0, 20.0, 40.0],
                   ttft_ms_p50=[50.0, 100.0, 200.0], itl_ms_p50=[5.0, 8.0, 10.0])
    first, second = latency_sentences(table, 50)
    assert first.startswith("P50 time to first token (TTFT) grows from 50 ms at batch 1 to 200 ms at batch 4 (4.0×)")
    assert "from about 200 to 100 tokens/s" in second  # 1000 / 5 ms and 1000 / 10 ms


def test_latency_missing_columns_are_named() -> None:
    first, second = latency_sentences(points(output_tokens_per_s=[1.0, 2.0]))
    assert "recorded no time to first token" in first
    assert "recorded no inter-token latency" in second


# ---- step 3: utilisation ----

def test_busy_time_saturates_before_throughput_and_gpm_at_the_best_batch() -> None:
    table = points(output_tokens_per_s=[100.0, 200.0, 400.0, 800.0], gpu_util_pct=[50.0, 95.0, 99.0, 99.0],
                   sm_util_pct=[5.0, 10.0, 20.0, 40.0], tensor_active_pct=[1.0, 2.0, 3.0, 5.0],
                   dram_bw_util_pct=[10.0, 20.0, 40.0, 60.0])
    first, second = utilisation_sentences({"device": "cuda"}, table)
    assert first.startswith("GPU busy-time (NVML) first reaches 90 % at batch 2 (95 %), yet throughput goes on to "
                            "its best median at batch 8 (800 tok/s, 4.0× what batch 2 gave)")
    assert second == ("At batch 8, where throughput is best, the GPM counters say the SMs are active 40 % of the "
                      "time, the tensor cores 5 % and DRAM bandwidth is 60 % used: the GPU is mostly moving "
                      "memory, not doing matrix math.")


def test_busy_time_that_never_saturates_and_missing_gpm() -> None:
    table = points(output_tokens_per_s=[10.0, 30.0], gpu_util_pct=[8.0, 15.0])
    first, second = utilisation_sentences({}, table)
    assert first == ("GPU busy-time (NVML) never reaches 90 %: its highest is 15 % at batch 2, while throughput "
                     "peaks at batch 2 (30 tok/s).")
    assert second.startswith("This run has no GPM counters") and second.endswith("there it reads 15 %.")


def test_cpu_runs_say_which_cpu_numbers_exist() -> None:
    table = points(output_tokens_per_s=[10.0, 30.0], cpu_pct=[50.0, 80.0], rss_bytes_max=[GiB, 2 * GiB],
                   gpu_util_pct=[float("nan")] * 2)
    first, second = utilisation_sentences({"device": "cpu"}, table)
    assert first.startswith("This run recorded no GPU utilisation (device: cpu)")
    assert second == ("What it has instead: process CPU % going from 50 % at batch 1 to 80 % at batch 2 and "
                      "peak resident memory up to 2.0 GiB.")
    assert "no CPU numbers either" in utilisation_sentences({}, points(output_tokens_per_s=[1.0]))[1]


# ---- step 4: memory ----

def memory_points(status: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Weights 2 GiB; KV allocated 0.5/1/2 GiB of which used half; activations 0.5/1/2 GiB; allocator reserve
    0/0/0.5 GiB on a 12 GiB device. Whole footprint: 3, 4 and 6.5 GiB at batch 1, 2, 4."""
    table = points(mem_weights=[2 * GiB] * 3, mem_kv_used=[GiB / 4, GiB / 2, GiB],
                   mem_kv_allocated=[GiB / 2, GiB, 2 * GiB], mem_activations=[GiB / 2, GiB, 2 * GiB],
                   mem_allocator_reserve=[0, 0, GiB / 2], mem_other=[float("nan")] * 3,
                   mem_nvml_used=[float("nan")] * 3, mem_capacity=[12 * GiB] * 3, status=status)
    return table, memory_split(table.assign(**{c: table[c].where(table["status"] == "ok") for c in table
                                               if c.startswith("mem_")}))


def test_memory_one_kv_measure_and_capacity_from_the_whole_footprint() -> None:
    table, split = memory_points(["ok", "ok", "ok"])
    first, second = memory_sentences(table, split)
    assert first == ("The weights take 2.0 GiB at every batch size, while the KV cache allocated (what the cache "
                     "reserves) grows with the batch: 512 MiB at batch 1, 2.0 GiB at batch 4, 512 MiB per request.")
    # batch 2 → 4: 4 → 6.5 GiB over 2 rows = 1.25 GiB per request (KV 0.5, activations 0.5, reserve 0.25);
    # 5.5 GiB free at batch 4 → 4 + 5.5 / 1.25 = 8.4 (KV alone, 0.5 GiB per request, would say 15).
    assert second == ("No batch ran out of memory; the largest, 4, used 6.5 GiB of the 12.0 GiB on the device "
                      "(54 %); from batch 2 to 4 the whole footprint grew 1.2 GiB per request (KV cache 512 MiB, "
                      "activations 512 MiB, allocator reserve 256 MiB), so at that rate the device fills near batch 8.")
    used_only = table.drop(columns=["mem_kv_allocated"])
    assert "the KV cache used (what live tokens fill) grows with the batch: 256 MiB at batch 1, 1.0 GiB at batch 4, " \
           "256 MiB per request." in memory_sentences(used_only, split)[0]


def test_memory_names_the_oom_point_and_missing_split() -> None:
    table, split = memory_points(["ok", "ok", "oom"])
    # batch 1 → 2: 3 → 4 GiB, 1 GiB per request; 8 GiB free at batch 2 → full near 2 + 8 = 10, past the OOM at 4
    assert memory_sentences(table, split)[1] == (
        "Batch 4 ran out of memory; the largest batch that fit, 2, used 4.0 GiB of the 12.0 GiB on the device "
        "(33 %); from batch 1 to 2 the whole footprint grew 1.0 GiB per request (KV cache 512 MiB, activations "
        "512 MiB, allocator reserve 0 B), which alone would fill it only near batch 10, so batch 4 needed more than "
        "that growth predicts.")
    tight = table.assign(mem_capacity=[5 * GiB] * 3)
    assert memory_sentences(tight, split)[1].endswith(
        "from batch 1 to 2 the whole footprint grew 1.0 GiB per request (KV cache 512 MiB, activations 512 MiB, "
        "allocator reserve 0 B), so at that rate it was full near batch 3.")
    empty = pd.DataFrame(columns=["batch_size", "x", "status", "part", "bytes"])
    first, second = memory_sentences(points(output_tokens_per_s=[1.0]), empty)
    assert "recorded no memory split" in first and "no memory measurement" in second


# ---- step 5: roofline ----

def test_roofline_share_bound_and_ridge() -> None:
    table = points(decode_step_ms=[2.0, 4.0, 8.0], predicted_step_ms=[1.0, 1.5, 2.0],
                   roofline_pct=[50.0, 37.5, 25.0], bound=["memory"] * 3)
    run = {"model": {"weight_bytes": GiB}}
    first, second = roofline_sentences(run, table, analysis(table, ridge=64.0))
    assert first == ("A decode step takes 2 ms at batch 1 against a floor of 1 ms (50 % of roofline), and 8 ms at "
                     "batch 4 against a floor of 2 ms (25 % of roofline).")
    assert second == ("Every measured batch is memory-bound: each step reads the 1.0 GiB of weights however many "
                      "rows it serves, so the floor only grows from 1 ms to 2 ms over a 4× larger batch; the ridge, "
                      "where compute time catches up with memory time, lies near batch 64, beyond the largest "
                      "measured (4).")
    mixed = table.assign(bound=["memory", "memory", "compute"])
    assert roofline_sentences(run, mixed, analysis(mixed, ridge=3.0))[1].startswith(
        "Batches below 4 are memory-bound and from 4 on compute-bound; the ridge")


def test_an_engine_that_reads_its_whole_cache_is_told_apart_from_the_gpu() -> None:
    # batch 4: 8 ms measured against a 2 ms floor; the fast engine's static step reads 1 GB of weights and its
    # whole 5.5 GB cache (5.1 GiB) at 1 TB/s: at least 6.5 ms, (6.5 − 2) / (8 − 2) = 75 % of the gap from floor
    # to step
    table = points(decode_step_ms=[2.0, 4.0, 8.0], predicted_step_ms=[1.0, 1.5, 2.0], roofline_pct=[50.0, 37.5, 25.0],
                   bound=["memory"] * 3, mem_kv_allocated=[1e8, 1e9, 5.5e9])
    run = {"engine": "fast", "mode": "static", "model": {"weight_bytes": 1e9},
           "calibration": {"copy_bytes_per_s": 1e12, "matmul_flops_per_s": 1e15},
           "env": {"engine": "fast 2 (packed prefill, compile True, graphs True; torch 2.11.0+cu130)"}}
    first = roofline_sentences(run, table, analysis(table))[0]
    assert first.endswith("8 ms at batch 4 against a floor of 2 ms (25 % of roofline). At batch 4 this run's engine "
                          "(fast 2; later versions read only what is filled) reads its whole 5.1 GiB KV cache each "
                          "step, sized for the point's longest draw: that read takes at least 6.5 ms, so 75 % of the "
                          "gap to the floor is the engine's padding, not the GPU."), \
        first
    # hf-generate reads what is filled; the fast engine's continuous batches read their own blocks, and so do its
    # static ones from version 3 on; a run whose engine version is not recorded is not told; a cache read under
    # 1.25× the floor (2.4 ms: 1.4 GB) is not worth a sentence: each ends at the roofline sentence
    for other, frame in (({**run, "engine": "hf-generate"}, table), ({**run, "mode": "continuous"}, table),
                         ({**run, "env": {"engine": "fast 3 (packed prefill)"}}, table), ({**run, "env": {}}, table),
                         (run, table.assign(mem_kv_allocated=[1e8, 1e9, 1.4e9]))):
        assert roofline_sentences(other, frame, analysis(frame))[0].endswith("(25 % of roofline)."), other


def test_roofline_without_model_facts_or_steps() -> None:
    first, second = roofline_sentences({}, points(decode_step_ms=[2.0, 3.0]), None)
    assert first.startswith("This run has no roofline") and "2 ms at batch 1 and 3 ms at batch 2" in first
    assert "not called" in second
    assert "recorded no decode step" in roofline_sentences({}, points(output_tokens_per_s=[1.0]), None)[0]


# ---- step 6: working point ----

def test_working_point_under_an_slo() -> None:
    slo = SLO("ttft", 95, 500.0)
    table = points(output_tokens_per_s=[100.0, 300.0, 400.0], ttft_ms_p95=[100.0, 400.0, 900.0])
    first, second = working_point_sentences(table, analysis(table, slo_limit=2, working_point=2, slo=slo), slo)
    assert first == "Under a P95 TTFT SLO of 500 ms, batch 2 is the largest that meets it (400 ms); batch 4 takes 900 ms."
    assert second == ("The working point is batch 2: 300 tok/s at 400 ms P95 TTFT, 75 % of the best measured "
                      "(400 tok/s at batch 4); the SLO, not throughput, sets it.")
    loose = SLO("ttft", 95, 1000.0)
    assert working_point_sentences(table, analysis(table, slo_limit=4, working_point=4, slo=loose), loose) == (
        "Every measured batch meets a P95 TTFT SLO of 1 000 ms, up to batch 4 at 900 ms.",
        "The working point is batch 4: 400 tok/s at 900 ms P95 TTFT, the best measured; it is the largest batch measured.")


def test_working_point_missing_cases() -> None:
    table = points(output_tokens_per_s=[100.0, 300.0], ttft_ms_p95=[600.0, 900.0])
    tight = SLO("ttft", 95, 500.0)
    first, second = working_point_sentences(table, analysis(table, slo=tight), tight)
    assert first == "No batch meets a P95 TTFT SLO of 500 ms: even batch 1 takes 600 ms."
    assert second == "So there is no working point: no batch at or before the plateau meets the 500 ms P95 TTFT SLO."
    assert working_point_sentences(table, analysis(table, working_point=2), None)[0] == \
        "No latency SLO is set, so every batch is allowed on latency."
    itl = SLO("itl", 99, 50.0)
    assert "recorded no P99 ITL latency" in working_point_sentences(table, analysis(table, slo=itl), itl)[0]


# ---- fast vs hf-generate ----

def test_contrast_step_ratio_and_overhead() -> None:
    fast = points(output_tokens_per_s=[800.0, 1500.0], decode_step_ms=[1.0, 1.1], gpu_util_pct=[70.0, 95.0])
    hf = points(output_tokens_per_s=[60.0, 110.0, 200.0], decode_step_ms=[12.0, 13.0, 14.0],
                gpu_util_pct=[10.0, 15.0, 20.0])
    step = contrast({"engine": "fast", "model_name": "llama"}, fast, {"engine": "hf-generate"}, hf)
    assert step is not None and step.key == "contrast"
    step.chart.to_dict()
    assert step.sentences[0] == ("At batch 1, the smallest both ran, a hf-generate decode step takes 12 ms against "
                                 "fast's 1 ms: 12× as long for the same llama weights.")
    assert step.sentences[1].startswith("There hf-generate keeps the GPU busy only 10 % of the time (fast: 70 %)")
    assert "keeps climbing until batch 4 (200 tok/s)" in step.sentences[1]


def test_contrast_says_when_the_slow_engines_step_is_not_set_by_the_batch() -> None:
    # by hand: hf's batch-1 step is 40 ms, its batch-4 step 12 ms (under 20, half of 40): flagged; 25 is not
    fast = points(decode_step_ms=[1.0, 1.1, 1.2], gpu_util_pct=[70.0, 80.0, 90.0])
    step = contrast({"engine": "fast"}, fast, {"engine": "hf-generate"},
                            points(decode_step_ms=[40.0, 45.0, 12.0], gpu_util_pct=[9.0, 10.0, 30.0]))
    assert step.sentences[0].endswith("40× as long for the same model weights; but its step is not set by the batch "
                                      "size: 12 ms at batch 4, under half of batch 1's, so the ratio changes within "
                                      "the run.")
    steady = contrast({"engine": "fast"}, fast, {"engine": "hf-generate"},
                              points(decode_step_ms=[40.0, 45.0, 25.0], gpu_util_pct=[9.0, 10.0, 30.0]))
    assert "not set by the batch" not in steady.sentences[0]


def test_contrast_without_shared_batches_or_utilisation() -> None:
    fast = points(decode_step_ms=[1.0])
    far = points(decode_step_ms=[5.0, 6.0]).assign(batch_size=[8, 16])
    assert contrast({"engine": "fast"}, fast, {"engine": "hf-generate"}, far) is None
    step = contrast({"engine": "fast"}, fast, {"engine": "hf-generate"}, points(decode_step_ms=[5.0]))
    assert step.sentences[1].startswith("hf-generate recorded no GPU utilisation at batch 1")


# ---- the demo runs: whole steps, and the page's choices ----

def test_every_demo_run_gives_six_steps_each_a_chart_and_two_sentences(demo_store: Store) -> None:
    slo = SLO("ttft", 95, 500.0)
    stories = {}
    for run_id in demo_store.runs()["run_id"]:  # continuous runs included: none may crash
        data = load_run(demo_store, run_id, slo)
        steps = explain_steps(data.run, data.table, data.analysis, data.split, slo)
        assert [s.key for s in steps] == ["throughput", "latency", "utilisation", "memory", "roofline", "working_point"]
        for step in steps:
            assert "$schema" in step.chart.to_dict()
            assert len(step.sentences) == 2 and all(s.endswith(".") for s in step.sentences), step.sentences
        stories[run_id] = [s.sentences for s in steps]
        if data.analysis.axis.key != "batch_size":
            continue
        curve = measured(data.table, "output_tokens_per_s")
        peak = int(curve.loc[curve["output_tokens_per_s"].idxmax(), "batch_size"])
        title = steps[0].title
        if "peaks at batch" in title:  # a peak claimed is the measured peak, before the largest batch
            assert f"peaks at batch {peak}," in title and peak < curve["batch_size"].max(), (run_id, title)
        if "still rising" in title:
            assert peak == curve["batch_size"].max(), (run_id, title)
        assert "where the returns diminish" not in title
    for key in range(6):  # each step's text comes from the run: no two runs tell it the same way
        told = [story[key] for story in stories.values()]
        assert len(set(told)) == len(told), key


LATENCY_WORDS = ("TTFT", "ITL", "E2E")
CHANGE_WORDS = re.compile(r"\b(falls?|fell|rises?|rising|peaks?|dips?|loses)\b", re.IGNORECASE)
NOISE_WORDS = re.compile(r"noise|repeats overlap", re.IGNORECASE)


def drawn(chart_spec: dict) -> str:
    """What a chart draws, as words: its axis titles and the series (and runs) of its data."""
    found: list[str] = []

    def visit(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "y" and isinstance(value, dict) and isinstance(value.get("title"), str):
                    found.append(value["title"])
                if key == "title" and isinstance(value, str):
                    found.append(value)
                visit(value)
        elif isinstance(node, list):
            for item in node:
                if isinstance(item, dict) and "series" in item:
                    found.append(str(item["series"]))
                else:
                    visit(item)
    visit(chart_spec)
    return " | ".join(found)


def test_every_explain_step_of_the_shipped_runs_names_what_its_chart_draws_and_never_calls_noise_a_change(
        demo_store: Store) -> None:
    """Every step of every shipped static run's whole walk (its six steps and the chapters other runs allow):
    a latency metric (TTFT, ITL, E2E) is named in the text exactly when the chart draws it, throughput and
    the decode step the chart draws are named, runs are named, not given by id, and no headline or clause
    calls a change both a rise/fall and within the noise."""
    slo = SLO("ttft", 95, 500.0)
    runs = demo_store.runs()
    loaded: dict = {}
    load = (lambda rid: loaded.setdefault(rid, load_run(demo_store, rid, None)))
    spec_of = (lambda rid: (demo_store.run(rid) or {}).get("spec"))
    told = 0
    for run_id in runs["run_id"]:
        data = load_run(demo_store, run_id, slo)
        if data.analysis.axis.key != "batch_size":
            continue  # the page explains batch-size sweeps only
        for step in explain_view.walk(data, runs, load, spec_of, slo):
            text = " ".join((step.title, *step.sentences))
            chart = drawn(step.chart.to_dict())
            where = (run_id, step.key)
            assert {w for w in LATENCY_WORDS if w in text} == {w for w in LATENCY_WORDS if w in chart}, \
                (where, text, chart)
            if "tokens/s" in chart:
                assert "throughput" in text.lower() or "tok/s" in text, where
            if "decode step" in chart:
                assert "decode step" in text, where
            assert not any(rid in text for rid in runs["run_id"]), (where, text)
            assert not (CHANGE_WORDS.search(step.title) and NOISE_WORDS.search(step.title)), (where, step.title)
            for clause in (c for sentence in step.sentences for c in sentence.split(";")):
                assert not (CHANGE_WORDS.search(clause) and NOISE_WORDS.search(clause)), (where, clause)
            told += 1
    assert told >= 12 * 6  # twelve static runs, six steps each at least


def test_default_run_makes_the_case_and_the_partner_is_never_the_cut_short_run(demo_store: Store) -> None:
    runs = demo_store.runs()
    load = (lambda rid: load_run(demo_store, rid, None))
    chosen = explain_view.default_run(runs, load)
    # by hand: of the finished demo static sweeps whose throughput peaks before the largest batch or plateaus,
    # the fast 8B runs have the most ok points (7: bf16, fp8, int8); bf16 is the full-precision one
    assert chosen == "h200-fast-8b-bf16-chat"
    data = load(chosen)
    curve = measured(data.table, "output_tokens_per_s")
    assert curve["output_tokens_per_s"].idxmax() < len(curve) - 1  # peaks before its largest batch
    spec_of = (lambda rid: demo_store.run(rid)["spec"])
    assert explain_view.partner_run(data.run, data.table, runs, spec_of, lambda rid: load(rid).table) is None
    small = load("h200-fast-1b-bf16-chat")  # its hf-generate contrast: the same model, dtype and chat lengths
    assert explain_view.partner_run(small.run, small.table, runs, spec_of,
                                    lambda rid: load(rid).table) == "h200-hf-1b-bf16-chat"
    plain = runs.assign(demo=False)
    assert explain_view.default_run(plain, load) == plain.iloc[0]["run_id"]  # no demo runs: the newest


def test_history_offers_the_explain_default_beside_the_other_model_measured_the_same_way(
        demo_store: Store) -> None:
    runs = demo_store.runs()
    load = (lambda rid: load_run(demo_store, rid, None))
    asked = []

    def anchor() -> str | None:
        asked.append(1)
        return explain_view.default_run(runs, load)

    # by hand: the default is the 8B fast bf16 chat sweep; of the other model's fast bf16 runs, 1B chat has the most
    # ok points (8) and the same lengths; hf-generate, fp16/fp8/int8 differ in engine or dtype
    offered = history_view.default_overlay(runs, anchor, load)
    assert offered == ["h200-fast-1b-bf16-chat", "h200-fast-8b-bf16-chat"]
    shots = importlib.util.spec_from_file_location("readme_shots", REPO / "bench" / "readme_shots.py")
    readme = importlib.util.module_from_spec(shots)
    shots.loader.exec_module(readme)
    assert readme.SHOTS["history-1b-vs-8b.png"][1] == offered  # the README's History picture is the offer
    no_chat = runs[runs["run_id"] != "h200-fast-1b-bf16-chat"]  # 1B long is left: other lengths, so no offer
    assert history_view.default_overlay(no_chat, anchor, load) == []
    own = runs.assign(demo=[True] * (len(runs) - 1) + [False])
    before = len(asked)
    assert history_view.default_overlay(own, anchor, load) == [] and len(asked) == before  # a run of the user's own:
    # nothing offered, and the default run is not even chosen (it analyses every demo run)
    assert history_view.default_overlay(runs[runs["model"] == "llama-3.1-8b"], anchor, load) == []  # one model
    assert history_view.default_overlay(runs, lambda: None, load) == []


def test_partner_ranks_shared_batches_then_lengths_then_done_then_points() -> None:
    runs = pd.DataFrame({"run_id": ["a", "b", "c", "d", "e"], "engine": ["hf-generate"] * 4 + ["fast"],
                         "model": ["m", "m", "m", "other", "m"], "dtype": ["bf16"] * 5,
                         "state": ["cancelled", "done", "done", "done", "done"], "points_ok": [3, 4, 5, 9, 9]})
    steps = {"a": [1, 2, 4], "b": [1, 2, 8, 16], "c": [1, 2, 4, 8, 16], "d": [1, 2, 4]}
    tables = {rid: points(decode_step_ms=[1.0] * len(b)).assign(batch_size=b) for rid, b in steps.items()}
    specs = {"a": {"prompt_len": "fixed:16"}, "b": {"prompt_len": "fixed:8"}, "c": {"prompt_len": "fixed:8"}}
    run = {"engine": "fast", "model_name": "m", "dtype": "bf16", "spec": {"prompt_len": "fixed:16"}}
    own = points(decode_step_ms=[1.0] * 3)  # batches 1, 2, 4
    pick = (lambda run_, spec_of: explain_view.partner_run(run_, own, runs, spec_of, tables.get))
    assert pick(run, specs.get) == "a"  # a and c share 3 batches (b 2); a has the same lengths, though cancelled
    assert pick({**run, "spec": {"prompt_len": "fixed:99"}}, specs.get) == "c"  # no same lengths: the done one
    assert pick({**run, "engine": "vllm"}, specs.get) is None


def test_a_two_point_partner_only_when_no_fuller_one_exists() -> None:
    runs = pd.DataFrame({"run_id": ["short", "full"], "engine": ["hf-generate"] * 2, "model": ["m"] * 2,
                         "dtype": ["bf16"] * 2, "state": ["cancelled", "done"], "points_ok": [2, 3]})
    tables = {"short": points(decode_step_ms=[1.0, 1.0]), "full": points(decode_step_ms=[1.0] * 3).assign(batch_size=[1, 8, 16])}
    run = {"engine": "fast", "model_name": "m", "dtype": "bf16", "spec": {}}
    own = points(decode_step_ms=[1.0] * 2)  # batches 1, 2: shares two with "short", one with "full"
    assert explain_view.partner_run(run, own, runs, lambda rid: {}, tables.get) == "full"
    assert explain_view.partner_run(run, own, runs[runs["run_id"] == "short"], lambda rid: {}, tables.get) == "short"


def test_contrast_names_a_cancelled_run_as_cut_short() -> None:
    fast = points(output_tokens_per_s=[800.0, 1500.0], decode_step_ms=[1.0, 1.1], gpu_util_pct=[70.0, 95.0])
    hf = points(output_tokens_per_s=[60.0, 110.0], decode_step_ms=[12.0, 13.0], gpu_util_pct=[10.0, 15.0])
    step = contrast({"engine": "fast"}, fast, {"engine": "hf-generate", "run_id": "hf", "state": "cancelled"}, hf)
    assert step.sentences[0].endswith("; hf was cut short, cancelled after 2 batch sizes.")


def test_slo_range_spans_the_runs_latency() -> None:
    # 100..1600 ms with a 20 % margin is 80..1920: round values from 50 to 2000; the middle (400, on a
    # log scale) is nearer 500 (x1.25) than 250 (x1.6)
    choices, start = explain_view.slo_range(points(ttft_ms_p95=[100.0, 400.0, 1600.0]), "ttft_ms_p95")
    assert (choices, start) == ([50.0, 100.0, 200.0, 250.0, 500.0, 1000.0, 2000.0], 500.0)
    # 300..2000 ms: 240..2400 gives 200..2500 on 1-2-2.5-5; the middle 775 is nearer 1000 than 500
    choices, start = explain_view.slo_range(points(ttft_ms_p95=[300.0, 900.0, 2000.0]), "ttft_ms_p95")
    assert (choices, start) == ([200.0, 250.0, 500.0, 1000.0, 2000.0, 2500.0], 1000.0)
    # 10..14 ms is too narrow for 1-2-2.5-5 (5, 10, 20): the finer ladder gives 8..20, starting at 12
    choices, start = explain_view.slo_range(points(itl_ms_p95=[10.0, 12.0, 14.0]), "itl_ms_p95")
    assert (choices, start) == ([8.0, 10.0, 12.0, 15.0, 20.0], 12.0)
    assert explain_view.slo_range(points(itl_ms_p95=[1.0]), "ttft_ms_p95") is None


def test_nice_values_round_to_one_two_two_and_a_half_five() -> None:
    assert (explain_view.nice_floor(449.0), explain_view.nice_ceil(449.0)) == (250.0, 500.0)
    assert (explain_view.nice_floor(2289.0), explain_view.nice_ceil(2289.0)) == (2000.0, 2500.0)
    assert (explain_view.nice_floor(0.3), explain_view.nice_ceil(0.3)) == (0.25, 0.5)
    assert (explain_view.nice_floor(500.0), explain_view.nice_ceil(500.0)) == (500.0, 500.0)
    assert explain_view.nice_values(179.0, 2289.0) == [100.0, 200.0, 250.0, 500.0, 1000.0, 2000.0, 2500.0]


# ---- the page ----

def open_explain(at):
    at.switch_page("app_pages/explain.py")
    return at.run()


def step_sentences(at) -> list[str]:
    """The sentences drawn: every markdown but the present-mode style and counter."""
    return [m for m in texts(at, "markdown") if not m.startswith(("<div", "<style"))]


def counter(at) -> str:
    """Present mode's one-line counter, `step k of n`."""
    return next(m for m in texts(at, "markdown") if "step " in m and m.startswith("<div")).split(">")[1].split("<")[0]


@pytest.fixture
def demo(home, demo_history: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The app started on the shipped demo runs: its history holds them as its first start imports them
    (copied from the session's import, the same rows)."""
    monkeypatch.setenv("BATCHSCOPE_DEMO", str(DEMO))
    shutil.copyfile(demo_history, home[0])


def test_explain_page_with_the_demo_runs(home, demo) -> None:  # noqa: F811
    at = open_explain(app())
    no_traceback(at)
    assert not at.error and not at.warning, texts(at, "error") + texts(at, "warning")
    titles = texts(at, "subheader")
    total = len(titles)
    assert total == 9 and [t.split(":")[0] for t in titles[-3:]] == [  # the run's six steps, then three chapters
        "7. Continuous batching moves the knee", "8. Quantised weights move it again", "9. Two GPUs"], titles
    assert len(at.get("vega_lite_chart")) == total
    sentences = step_sentences(at)
    assert len(sentences) == 2 * total and all(sentences), sentences
    slo_sentence = sentences[10]
    slider = at.select_slider[0]
    assert slider.value == 500.0 and "500 ms" in slider.options and "1000 ms" in slider.options
    slider.set_value(1000.0).run()
    no_traceback(at)
    assert step_sentences(at)[10] != slo_sentence and "SLO of 1 000 ms" in step_sentences(at)[10]
    store = manager(home).store
    assert at.query_params["run"] == explain_view.default_run(store.runs(), lambda rid: load_run(store, rid, None))
    assert "step" not in at.query_params and "present" not in at.query_params

    at.toggle(key="explain_present").set_value(True).run()
    no_traceback(at)
    assert counter(at) == f"step 1 of {total}" and at.query_params["present"] == "1"
    assert len(at.get("vega_lite_chart")) == 1
    at.button(key="explain_next").click().run()
    at.button(key="explain_next").click().run()
    assert counter(at) == f"step 3 of {total}" and at.query_params["step"] == "3"
    assert step_sentences(at)[0].startswith("## 3. Utilisation")
    at.button(key="explain_previous").click().run()
    no_traceback(at)
    assert counter(at) == f"step 2 of {total}" and at.query_params["step"] == "2"
    assert len(step_sentences(at)) == 3  # the title and the two sentences
    at.toggle(key="explain_present").set_value(False).run()
    assert "present" not in at.query_params and len(texts(at, "subheader")) == total


def test_explain_page_with_a_tiny_cpu_run(home, tiny_run: Path) -> None:  # noqa: F811
    ingest_run(manager(home).store, tiny_run)
    at = open_explain(app())
    no_traceback(at)
    assert not at.error, texts(at, "error")
    assert len(texts(at, "subheader")) == 6  # no fast run of the tiny model: no contrast
    assert len(at.get("vega_lite_chart")) == 6
    sentences = step_sentences(at)
    assert len(sentences) == 12
    assert any(s.startswith("This run recorded no GPU utilisation (device: cpu)") for s in sentences)
    assert "no engine contrast" in " ".join(texts(at, "caption"))
    assert at.query_params["run"] == at.selectbox(key="explain_run").value  # a reload opens this run again


def test_explain_page_with_no_runs(home) -> None:  # noqa: F811
    at = open_explain(app())
    no_traceback(at)
    assert "No runs yet" in " ".join(texts(at, "info"))
    at.query_params.update({"run": "nothing-here", "step": "2", "present": "1"})
    at.run()
    no_traceback(at)
    assert "No runs yet" in " ".join(texts(at, "info"))


def test_explain_and_the_run_page_share_one_noise_rule() -> None:
    """A noisy rise to batch 2, then 2.5 % less at batch 4: the Run page calls the rise noise and leaves the
    plateau undecided, so Explain must not call the drop a fall; with tight repeats both call a plateau."""
    table = points(output_tokens_per_s=[1000.0, 1200.0, 1170.0], output_tokens_per_s_min=[980.0, 900.0, 1100.0],
                   output_tokens_per_s_max=[1020.0, 1500.0, 1240.0])
    run_page = analyse(table, None, None)
    assert run_page.plateau is None and any("within noise" in note for note in run_page.notes)
    second = throughput_sentences(table, run_page)[1]
    assert "falls" not in second and second.startswith("By batch 2 it levels off: batch 4 gives 1 170 tok/s")
    tight = table.assign(output_tokens_per_s_min=[990.0, 1190.0, 1160.0], output_tokens_per_s_max=[1010.0, 1210.0, 1180.0])
    assert throughput_sentences(tight, analyse(tight, None, None))[1].startswith("Past batch 2 it plateaus")


def test_explain_never_asks_for_larger_batches_past_an_oom() -> None:
    table = points(output_tokens_per_s=[100.0, 300.0, 800.0, float("nan")], status=["ok", "ok", "ok", "oom"])
    second = throughput_sentences(table, analysis(table))[1]
    assert "batch 8 ran out of memory, so this is as far as the device goes" in second
    assert "beyond the largest batch" not in second


def test_a_rise_the_run_page_calls_still_rising_is_not_called_noise_by_explain() -> None:
    table = points(output_tokens_per_s=[500.0, 2962.0, 4201.0], output_tokens_per_s_min=[490.0, 2596.0, 3240.0],
                   output_tokens_per_s_max=[510.0, 3329.0, 5161.0])
    run_page = analyse(table, None, None)
    assert any(note.startswith("No plateau: going from batch 2 to 4 still adds") for note in run_page.notes)
    second = throughput_sentences(table, run_page)[1]
    assert "noise" not in second and "the last (2 → 4) only 41.8 %" in second
