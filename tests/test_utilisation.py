"""Hand-checked utilisation means and energy of one point from tagged telemetry samples."""
import pytest

from runners.metrics.utilisation import Window, tag_samples, utilisation
from runners.results.schemas import UTIL_MEANS
from runners.telemetry.telemetry import clock_reason_names

WINDOW = [Window(0, 100.0, 100.5, 102.0)]  # repeat 0 ran from host time 100 s to 102 s; first token at 100.5 s
POINT, TOKENS = 3, 40  # point 3 produced 40 output tokens in its measured repeats


def sample(point: int, stage: str, repeat: int, phase: str, power: float, util: float, gpu: int | None = None,
           loaded: bool | None = None):
    """A tagged sample; inside a repeat it is the load's unless told (a repeat without a load window)."""
    row = dict.fromkeys(UTIL_MEANS)
    row.update(point_index=point, stage=stage, repeat=repeat, phase=phase, power_w=power, gpu_util_pct=util,
               cpu_pct=100.0, rss_bytes=1, source="proc,nvml", gpu_index=gpu,
               loaded=repeat >= 0 if loaded is None else loaded)
    return row


def test_only_samples_inside_the_repeats_count():
    samples = [
        sample(2, "measure", -1, "idle", 50.0, 0.0),      # the previous point's closing sample
        sample(3, "setup", -1, "setup", 100.0, 10.0),     # graph capture: long, cheap, must not count
        sample(3, "measure", 0, "prefill", 400.0, 90.0),
        sample(3, "measure", 0, "decode", 400.0, 100.0),
        sample(3, "measure", 0, "decode", 400.0, 100.0),
    ]
    out = utilisation(samples, POINT, WINDOW, TOKENS)
    assert out["energy_j"] == pytest.approx(800.0)          # 400 W × 2 s
    assert out["energy_per_output_token_j"] == pytest.approx(20.0)  # 800 J / 40 tokens
    assert out["gpu_util_pct"] == pytest.approx(290 / 3)    # mean of 90, 100, 100
    assert out["gpu_util_pct_decode"] == pytest.approx(100.0)


def test_an_online_point_counts_its_requests_not_its_batch_limit():
    samples = [sample(3, "measure", 0, "decode", 400.0, 100.0)]
    # 400 W × 2 s = 800 J over 10 tokens × 20 requests (not × the batch limit of 4): the caller passes
    # every output token of the measured repeats
    assert utilisation(samples, POINT, WINDOW, 10 * 20)["energy_per_output_token_j"] == 4.0


def test_energy_sums_every_gpu():
    samples = [sample(3, "measure", 0, "decode", 400.0, 100.0, gpu=0),
               sample(3, "measure", 0, "decode", 200.0, 100.0, gpu=1)]
    assert utilisation(samples, POINT, WINDOW, TOKENS)["energy_j"] == pytest.approx(1200.0)  # (400 + 200) W × 2 s


def test_a_repeat_too_short_to_sample_keeps_means_but_no_energy():
    samples = [sample(2, "measure", -1, "idle", 50.0, 5.0), sample(3, "measure", -1, "idle", 300.0, 70.0)]
    out = utilisation(samples, POINT, WINDOW, TOKENS)
    assert out["energy_j"] is None and out["energy_per_output_token_j"] is None
    assert out["gpu_util_pct"] == 70.0  # this point's measure-stage sample only, not the previous point's


def test_samples_are_tagged_by_repeat_window_and_first_token():
    rows = [{"host_t": t, "stage": "measure", "t_s": t} for t in (99.0, 100.2, 101.0, 103.0)]
    tagged = tag_samples(rows, WINDOW)
    assert [(r["repeat"], r["phase"]) for r in tagged] == [(-1, "idle"), (0, "prefill"), (0, "decode"), (-1, "idle")]
    assert [r["loaded"] for r in tagged] == [False, True, True, False]  # a repeat with no load window is the load


def test_a_repeats_load_window_goes_on_the_host_clock_and_its_samples_alone_make_the_means():
    # repeat 0 from host time 100 s to 102 s; its row's load window is 250 → 1 500 ms from its start
    row = {"loaded_start_ms": 250.0, "loaded_end_ms": 1500.0, "loaded_output_tokens": 30}
    window = WINDOW[0].loaded(row)
    assert window.load == (100.25, 101.5) and WINDOW[0].loaded({"loaded_start_ms": None}) == WINDOW[0]
    rows = [{"host_t": t, "stage": "measure", "t_s": t} for t in (100.1, 100.3, 101.5, 101.8)]
    assert [r["loaded"] for r in tag_samples(rows, [window])] == [False, True, True, False]
    # 60 % util under the load, 20 % in the drain after it: the means are the load's, energy the whole repeat's
    samples = [sample(3, "measure", 0, "decode", 500.0, 60.0, loaded=True),
               sample(3, "measure", 0, "decode", 500.0, 60.0, loaded=True),
               sample(3, "measure", 0, "decode", 200.0, 20.0, loaded=False)]
    out = utilisation(samples, POINT, [window], TOKENS)
    assert out["gpu_util_pct"] == pytest.approx(60.0) and out["gpu_util_pct_decode"] == pytest.approx(60.0)
    assert out["power_w"] == pytest.approx(500.0)
    assert out["energy_j"] == pytest.approx(400.0 * 2.0)  # (500 + 500 + 200) / 3 W over the repeat's 2 s
    # a window too short to hold a sample: the repeat's samples stand in
    drain_only = [sample(3, "measure", 0, "decode", 200.0, 20.0, loaded=False)]
    assert utilisation(drain_only, POINT, [window], TOKENS)["gpu_util_pct"] == pytest.approx(20.0)


def test_clock_range_reasons_and_processes_for_the_trust_checks():
    """SM clock min/max and NVML's clock event reasons come from the repeats' samples only; the process
    count (listed at each stage's first sample) from any of the point's samples."""
    rows = [sample(3, "setup", -1, "setup", 100.0, 10.0), sample(3, "measure", 0, "decode", 400.0, 100.0),
            sample(3, "measure", 0, "decode", 400.0, 100.0)]
    for row, clock, reasons, processes in zip(rows, (900.0, 1980.0, 1700.0), (0x1, 0x4, 0x4 | 0x40), (2, None, None)):
        row.update(sm_clock_mhz=clock, clock_reasons=reasons, gpu_processes=processes)
    out = utilisation(rows, POINT, WINDOW, TOKENS)
    assert (out["sm_clock_mhz_min"], out["sm_clock_mhz_max"]) == (1700.0, 1980.0)  # setup's idle 900 MHz left out
    assert out["clock_reasons"] == "sw_power_cap,hw_thermal" and out["gpu_processes_max"] == 2
    cpu = [sample(3, "measure", 0, "decode", None, None)]  # a CPU run records none of them
    assert {k: utilisation(cpu, POINT, WINDOW, TOKENS)[k] for k in ("sm_clock_mhz_min", "clock_reasons",
                                                                     "gpu_processes_max")} == dict.fromkeys(
        ("sm_clock_mhz_min", "clock_reasons", "gpu_processes_max"))
    assert clock_reason_names(0x8 | 0x400) == ["hw_slowdown", "0x400"]
