"""Page logic without a browser: New sweep validation and estimates, Run wording, History helpers."""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from batchscope.analysis import SLO
from batchscope.analysis.axis import BATCH
from batchscope.store import Store
from batchscope.ui import form, history_view, run_view, run_view_tables, tables

GiB = 1024**3


def tiny_form(**changes) -> form.SweepForm:
    values = dict(model="tiny", dtype="float32", device="cpu", batch_mode="list", batch_list="1,2,4",
                  prompt_len="fixed:16", output_len="fixed:4", repeats=2)
    return form.SweepForm(**{**values, **changes})


def test_a_valid_form_has_no_problems_and_makes_the_runner_spec() -> None:
    values = tiny_form()
    assert form.check(values) == {}
    assert values.spec_dict()["batch_sizes"] == "1,2,4"
    assert form.batch_sizes(tiny_form(batch_mode="pow2", batch_lo=2, batch_hi=16)) == [2, 4, 8, 16]


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"model": ""}, "model", "choose a preset"),
    ({"model": str(Path.home() / "no" / "such" / "checkpoint")}, "model", "unknown model"),
    ({"model": "/etc"}, "model", "outside the allowed model folders"),
    ({"batch_list": ""}, "batch_sizes", "no batch sizes"),
    ({"batch_list": "0,2"}, "batch_sizes", "≥ 1"),
    ({"batch_list": "1,two"}, "batch_sizes", "not a whole number"),
    ({"batch_list": "1,10000"}, "batch_sizes", "over the ceiling"),
    ({"batch_mode": "pow2", "batch_lo": 64, "batch_hi": 8}, "batch_sizes", "From (64) must not be larger than To (8)"),
    ({"batch_mode": "pow2", "batch_lo": 0, "batch_hi": 8}, "batch_sizes", "From must be at least 1 (it is 0)"),
    ({"batch_mode": "pow2", "batch_lo": 9, "batch_hi": 15}, "batch_sizes", "no power of two lies between 9 and 15"),
    ({"prompt_len": "lognormal:512"}, "prompt_len", "takes 2 number"),
    ({"output_len": "gamma:3:4"}, "output_len", "unknown distribution"),
    ({"prompt_len": "fixed:4000"}, "prompt_len", "over the model's context"),
])
def test_each_bad_input_is_named_by_its_field(changes: dict, field: str, words: str) -> None:
    found = form.check(tiny_form(**changes))
    assert field in found and words in found[field]


def test_the_preview_draws_nothing_past_what_a_sweep_may_draw() -> None:
    """Batches 1…65 536 with 3 + 1 repeats are 524 284 requests: refused by the spec, and not drawn for a
    histogram either (that took seconds on every rerun of the page)."""
    assert form.sweep_lengths(tiny_form(batch_mode="pow2", batch_lo=1, batch_hi=4096, repeats=3)) is not None
    assert form.sweep_lengths(tiny_form(batch_mode="pow2", batch_lo=1, batch_hi=65_536, repeats=3)) is None


def test_length_preview_matches_the_seed_and_says_its_numbers() -> None:
    first = form.length_preview("lognormal:100:0.5", seed=3, n=500)
    assert first == form.length_preview("lognormal:100:0.5", seed=3, n=500)
    assert first != form.length_preview("lognormal:100:0.5", seed=4, n=500)
    assert form.length_summary([10, 20, 30, 40]) == "median 25 · P95 38 · max 40 tokens (4 samples)"
    with pytest.raises(ValueError, match="use fixed"):
        form.length_preview("zipf:2", seed=0)


def test_capacity_default_says_where_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    from batchscope.backends import local

    no_runs = pd.DataFrame(columns=["run_id", "gpu", "gpu_memory_bytes"])
    assert "RAM" in form.default_capacity(no_runs, "cpu").source
    monkeypatch.setattr(local, "_nvidia_gpu_present", lambda: False)
    assert "no GPU is visible here, so auto runs on the CPU" in form.default_capacity(no_runs, "auto").source
    monkeypatch.setattr(local, "_nvidia_gpu_present", lambda: True)
    assert form.default_capacity(no_runs, "auto") == form.Capacity(150_109_880_320, form.default_capacity(
        no_runs, "auto").source)
    assert "H200" in form.default_capacity(no_runs, "cuda").source
    recorded = pd.DataFrame({"run_id": ["new", "old"], "gpu": ["NVIDIA H100", "NVIDIA A10"],
                             "gpu_memory_bytes": [85 * 10**9, 24 * 10**9]})
    capacity = form.default_capacity(recorded, "cuda")
    assert capacity.bytes == 85 * 10**9 and "run new on NVIDIA H100" in capacity.source


def test_memory_estimate_warns_for_batches_that_will_not_fit() -> None:
    big = tiny_form(model="llama-3.1-8b", dtype="bfloat16", batch_list="1,64,512", prompt_len="fixed:2048",
                    output_len="fixed:512")
    estimate = form.memory_estimate(big, 30 * GiB)  # 15 GiB weights + 20 GiB KV at batch 64
    assert estimate.error is None
    assert estimate.table["fits"].tolist() == [True, False, False]
    assert [w.split(":")[0] for w in estimate.warnings] == ["Will not fit", "Will not fit"]
    assert estimate.table["weights GiB"].iloc[0] == pytest.approx(14.96, abs=0.05)
    assert form.memory_estimate(tiny_form(), 40 * GiB).warnings == []
    assert "batch_sizes" in form.memory_estimate(tiny_form(batch_list="0"), 40 * GiB).error


def test_durations_and_progress_read_like_sentences() -> None:
    assert [run_view.format_duration(s) for s in (None, 4.4, 65, 7380)] == ["—", "4 s", "1 min 05 s", "2 h 03 min"]
    running = run_view.progress_view({"state": "running", "points_done": 2, "points_total": 8, "elapsed_s": 30,
                                      "eta_s": 90, "current": {"point_index": 2, "batch_size": 4,
                                                               "stage": "measure", "repeat": 1}}, repeats=3)
    assert running.live and running.fraction == 0.25 and running.headline == "2 of 8 points done"
    assert running.current == "point 3 · batch 4 · measuring (run 2, at most 3)"
    # a point measures until known: 6 runs at most by default, never fewer than its draws and replays
    assert (run_view.most_runs({"repeats": 3}), run_view.most_runs({"repeats": 8, "replays": 1}),
            run_view.most_runs({})) == (6, 9, None)
    assert (running.elapsed, running.eta) == ("30 s", "1 min 30 s")
    loading = run_view.progress_view({"state": "running", "points_done": 0, "points_total": 3,
                                      "current": {"point_index": None, "batch_size": None, "stage": "load"}})
    assert loading.current == "loading the model"
    queued = run_view.progress_view({"state": "queued", "points_total": 3, "queue_position": 2})
    assert queued.headline == "queued — position 2 in the queue" and queued.live
    assert not run_view.progress_view({"state": "done", "points_done": 3, "points_total": 3}).live


def test_points_table_downloads_and_fingerprint() -> None:
    table = pd.DataFrame({"batch_size": [2, 1], "status": ["ok", "ok"], "output_tokens_per_s": [10.4, 5.6],
                          "ttft_ms_p95": [1.23456, 2.0], "sm_util_pct": [None, None]})
    shown = run_view_tables.points_display(table)
    assert list(shown.columns) == ["batch", "output tok/s", "TTFT P95 ms"]  # every row is ok: no status column
    assert shown["batch"].tolist() == [1, 2] and shown["output tok/s"].tolist() == [5.6, 10.4]
    assert shown["TTFT P95 ms"].tolist() == [2.0, 1.23]
    assert pd.read_csv(io.BytesIO(run_view_tables.csv_bytes(table))).equals(table.astype({"sm_util_pct": float}))
    assert pd.read_parquet(io.BytesIO(run_view_tables.parquet_bytes(table)))["batch_size"].tolist() == [2, 1]
    env = run_view_tables.env_rows({"gpu": "NVIDIA H200", "driver": None})
    assert env.values.tolist() == [["gpu", "NVIDIA H200"], ["driver", "—"]]
    stored = {"run_id": "r", "name": "baseline", "model": {"name": "tiny", "params": 1}, "dtype": "float32",
              "engine": "fast"}
    assert run_view.run_title(stored) == "baseline — tiny · float32 · fast"
    assert run_view.run_title({**stored, "spec": {"tensor_parallel": 2, "replicas": 1}}) == (
        "baseline — tiny · float32 · fast · tensor parallel 2")
    assert run_view.run_title({**stored, "spec": {"tensor_parallel": 1, "replicas": 2}}).endswith("fast · 2 replicas")


def test_history_helpers_filter_label_and_refuse_bad_input() -> None:
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "name": ["x", "x", "y"], "model": ["tiny", "tiny", "m"],
                         "dtype": ["float32", "float32", None], "gpu": ["cpu", "cpu", "H200"],
                         "engine": ["fast"] * 3, "state": ["done", "failed", "done"], "demo": [False, True, False]})
    assert history_view.filter_choices(runs)["dtype"] == ["float32"]
    labels = history_view.overlay_labels(runs, ["a", "b", "c"])
    assert labels == {"a": "x · float32 · cpu", "b": "x · float32 · cpu [b]", "c": "y · H200"}
    assert history_view.runs_display(runs)["name"].tolist() == ["x", "x (demo)", "y"]
    named = pd.DataFrame({"run_id": ["q", "h", "s"], "name": ["8B · fp8", "1B · BF16", "8B · fp8-dynamic"],
                          "dtype": ["fp8", "bfloat16", "fp8"], "gpu": ["H200"] * 3})
    assert history_view.overlay_labels(named, ["q", "h", "s"]) == {  # the dtype once, in the name's words
        "q": "8B · fp8 · H200", "h": "1B · BF16 · H200", "s": "8B · fp8-dynamic · fp8 · H200"}
    assert history_view.overlay_problem(list("abcdefghijk")).startswith("overlay at most 10")
    assert history_view.overlay_problem(["a", "b"]) is None
    assert history_view.rename_problem("  ") and history_view.rename_problem("ok") is None


def test_import_refuses_what_is_not_a_run_folder_and_imports_a_real_one(tmp_path: Path, tiny_run: Path) -> None:
    store = Store(tmp_path / "db.duckdb")
    assert "enter the path" in history_view.import_folder(store, " ").error
    assert "not a folder" in history_view.import_folder(store, str(tmp_path / "missing")).error
    assert "not a run folder" in history_view.import_folder(store, str(tmp_path)).error
    result = history_view.import_folder(store, str(tiny_run))
    assert result.error is None and result.run_id == "tiny-cpu" and result.points_added == 3
    data = run_view.load_run(store, "tiny-cpu", SLO("ttft", 95, 1000.0))
    assert data.analysis.slo_limit is not None and len(data.table) == 3
    overlay = history_view.overlay_runs({"tiny-cpu": "tiny"}, lambda run_id: run_view.load_run(store, run_id, None))
    assert list(overlay) == ["tiny"]
    assert run_view.load_run(store, "nope", None) is None
    store.close()


def test_importing_a_run_whose_runner_is_gone_stores_it_interrupted(tmp_path: Path, tiny_run: Path) -> None:
    """The folder of a runner killed with -9 still says running (its pid is dead): stored interrupted, folder
    untouched."""
    folder = tmp_path / "killed-run"
    shutil.copytree(tiny_run, folder)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    status = {**json.loads((folder / "status.json").read_text()), "state": "running", "pid": gone.pid,
              "finished_at": None}
    (folder / "status.json").write_text(json.dumps(status))
    store = Store(tmp_path / "db.duckdb")
    assert history_view.import_folder(store, str(folder)).error is None
    run = store.run("killed-run")
    assert run["state"] == "interrupted" and run["error"] == (
        f"runner process {gone.pid} ended without finishing (last heartbeat {status['heartbeat_at']})")
    assert json.loads((folder / "status.json").read_text()) == status


def test_the_run_page_keeps_refreshing_until_the_last_points_are_stored() -> None:
    assert run_view.is_live({"state": "running"}) and run_view.is_live({"state": "queued"})
    assert run_view.is_live({"state": "done", "settled": False})  # the runner is done, the DB not yet
    assert not run_view.is_live({"state": "done", "settled": True})
    assert not run_view.is_live({"state": "failed"})  # a stored run no manager holds


def test_a_plain_run_page_opens_the_most_informative_run() -> None:
    runs = pd.DataFrame({"run_id": ["newest", "full", "older-full", "most"],
                         "state": ["cancelled", "done", "done", "failed"], "points_ok": [1, 5, 9, 12]})
    assert run_view.informative_run(runs) == "full"  # not the one-point cancelled run at the top
    assert run_view.informative_run(runs.assign(state=["running", "done", "done", "failed"])) == "newest"
    no_curve = runs.assign(state="cancelled", points_ok=[1, 2, 4, 2])
    assert run_view.informative_run(no_curve) == "older-full"
    assert run_view.informative_run(runs.iloc[0:0]) is None
    ids = runs["run_id"].tolist()
    assert run_view.pick_run(ids, None, None, "full") == ("full", None)
    assert run_view.pick_run(ids, None, "most", "full") == ("most", None)
    assert run_view.pick_run(ids, "older-full", "most", "full") == ("older-full", None)
    shown, error = run_view.pick_run(ids, "gone", "most", "full")
    assert shown == "most" and "no run with id 'gone'" in error


def test_points_table_puts_key_columns_first_sizes_in_gib_and_says_why_a_point_failed() -> None:
    oom_text = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 15.98 GiB. GPU 0 has a total capacity "
                "of 139.80 GiB of which 5.17 GiB is free. Including non-PyTorch memory, this process has ...")
    table = pd.DataFrame({"batch_size": [1, 256], "status": ["ok", "oom"], "error": [None, oom_text],
                          "output_tokens_per_s": [3582.43, None], "ttft_ms_p95": [226.7, None],
                          "itl_ms_p95": [1.8781, None], "mem_peak_allocated": [2.5 * GiB, None],
                          "decode_padding_waste": [0.125, None], "gpu_util_pct": [97.46, None]})
    shown = run_view_tables.points_display(table)
    assert list(shown.columns)[:3] == ["batch", "output tok/s", "TTFT P95 ms"]
    assert run_view_tables.failures(table, BATCH) == [
        "Batch 256: out of memory: needed 15.98 GiB more, 5.17 GiB of 139.80 GiB free"]
    assert run_view_tables.failures(table.iloc[:1], BATCH) == []  # every point ok: nothing to say
    assert run_view_tables.failed_outcome(table, BATCH) == (
        "1 of 2 points failed: batch 256, out of memory: needed 15.98 GiB more, 5.17 GiB of 139.80 GiB free")
    assert run_view_tables.failed_outcome(table.iloc[:1], BATCH) is None
    many = pd.DataFrame({"batch_size": [1, 2, 4, 8], "status": ["ok", "error", "error", "error"],
                         "error": [None, "Unreachable: cannot reach the server. It refused.", "Timeout.", "Timeout."]})
    assert run_view_tables.failed_outcome(many, BATCH) == (
        "3 of 4 points failed: batch 2, Unreachable: cannot reach the server; batch 4, Timeout.; and 1 more")
    assert shown["batch"].tolist() == [1]  # the OOM point has no measurements: its line says why instead
    assert shown["peak alloc GiB"].iloc[0] == 2.5 and shown["decode padding %"].iloc[0] == 12.5
    assert shown["output tok/s"].iloc[0] == 3582 and shown["ITL P95 ms"].iloc[0] == 1.88
    assert shown["GPU util %"].iloc[0] == 97.5
    assert tables.failure_summary("error", "RuntimeError: shapes do not match. More detail") == (
        "RuntimeError: shapes do not match")
    assert tables.failure_summary("oom", None) == "out of memory"
    config = tables.column_config(shown)
    assert config["output tok/s"]["type_config"]["format"] == "%.0f"
    assert config["ITL P95 ms"]["type_config"]["format"] == "%.2f"


def test_runs_and_comparison_tables_lead_with_their_key_columns() -> None:
    runs = pd.DataFrame({c: ["x"] for c in history_view.RUNS_TABLE_COLUMNS} | {"demo": [False]})
    assert list(history_view.runs_display(runs).columns)[:6] == [
        "name", "status", "points ok", "points", "best output tok/s", "run id"]
    assert list(history_view.runs_display(runs).columns)[-1] == "fingerprint"


def test_plain_text_escapes_what_markdown_would_turn_into_emoji_or_emphasis() -> None:
    from batchscope.ui.plain_text import plain

    assert plain("uniform:1:100: *x* __init__") == r"uniform\:1\:100\: \*x\* \_\_init\_\_"
    assert plain(r"a\b") == r"a\\b"


def test_a_stored_spec_fills_the_form_it_was_launched_from() -> None:
    from batchscope.ui import form_state

    spec = {"model": "llama-3.2-1b", "dtype": "bfloat16", "engine": "fast", "mode": "static", "device": "auto",
            "batch_sizes": [1, 3, 8], "prompt_len": "lognormal:512:0.6", "output_len": "fixed:64", "repeats": 2,
            "warmup": 1, "seed": 7, "on_oom": "continue", "name": "x", "run_id": "r", "created_at": "t"}
    again = form_state.form_from_spec(spec, SLO("e2e", 99, 900.0))
    assert again.spec_dict()["batch_sizes"] == "1,3,8" and again.batch_mode == "list"
    assert {k: again.spec_dict()[k] for k in ("model", "seed", "on_oom", "prompt_len")} == {
        "model": "llama-3.2-1b", "seed": 7, "on_oom": "continue", "prompt_len": "lognormal:512:0.6"}
    pow2 = form_state.form_from_spec({**spec, "batch_sizes": [4, 8, 16]}, None)
    assert (pow2.batch_mode, pow2.batch_lo, pow2.batch_hi, pow2.slo) == ("pow2", 4, 16, None)
    state = form_state.widget_state(again)
    assert state["batch_mode"] == "Explicit list" and state["slo_on"] and state["slo_percentile"] == 99
    continuous = form_state.form_from_spec({**spec, "mode": "continuous", "max_num_seqs": [1, 2, 4],
                                            "concurrency": [8], "arrival": "", "num_requests": 32}, None)
    assert (continuous.load, continuous.concurrency, continuous.max_num_seqs) == ("concurrency", "8", "1,2,4")
    path = form_state.widget_state(form_state.form_from_spec({**spec, "model": "/models/x"}, None))
    assert (path["model_source"], path["model_path"]) == ("Local checkpoint", "/models/x")


def test_workload_lines_say_what_each_point_ran() -> None:
    continuous = {"mode": "continuous", "prompt_len": "fixed:100", "output_len": "fixed:20", "seed": 1, "warmup": 0,
                  "repeats": 3, "num_requests": 64, "arrival": "poisson:1,2,4", "max_num_seqs": [8],
                  "max_num_batched_tokens": 2048, "engine": "fast", "device": "cuda"}
    lines = run_view.workload_lines(continuous)
    assert lines[1] == ("Each point: 3 measured repeats of 64 requests (192 measured) · Poisson arrivals 1,2,4 req/s")
    assert lines[2].startswith("max_num_seqs 8 · token budget per step 2,048")
    per_client = {**continuous, "arrival": "", "concurrency": [1, 4, 16], "requests_per_client": 2}
    assert run_view.workload_lines(per_client)[1] == (
        "Each point: 3 measured repeats of 2 requests per client, the first of 64 (at most 192 measured) · "
        "1, 4, 16 concurrent clients")
    # measured until known: the plan, then draws up to max_draws (here 6 runs: 64 × 6 requests at most)
    known = {**continuous, "target_interval": 0.05, "replays": 1, "max_draws": 6}
    assert run_view.workload_lines(known)[1] == (
        "Each point: 3 draws and 1 replay, then more draws until the throughput is known within ± 5 % (at most 6 "
        "runs) of 64 requests (at most 384 measured) · Poisson arrivals 1,2,4 req/s")
    static = {**known, "mode": "static", "batch_sizes": [1, 2]}
    assert run_view.workload_lines(static)[1].endswith("batch size (at most 6 × B measured)")
    assert run_view.workload_lines(None) == []


def test_live_progress_agrees_with_the_charts_and_names_no_point_after_the_last() -> None:
    running = {"state": "running", "points_done": 2, "points_total": 4,
               "current": {"point_index": 2, "batch_size": 4, "stage": "measure", "repeat": 0}}
    view = run_view.progress_view(running, repeats=2, stored=0)
    assert view.headline == "2 of 4 points done · 2 being stored" and view.current.startswith("point 3")
    assert run_view.progress_view(running, stored=2).headline == "2 of 4 points done"
    assert run_view.no_results_words(running) == (
        "2 points are finished and being stored: the charts appear in a moment.")
    assert run_view.no_results_words({"state": "running", "points_done": 0}).startswith("No finished points yet")
    last = {**running, "points_done": 4}  # the runner has not written done yet, but measures nothing
    assert run_view.progress_view(last).current == ""
    assert run_view.progress_view({**running, "state": "cancelled"}).current == ""


def test_overlaying_runs_from_different_devices_is_said_with_their_fingerprints() -> None:
    cpu = run_view.RunData({"run_id": "a", "device": "cpu", "torch_version": "2.13.0+cpu"}, None, pd.DataFrame())
    gpu = run_view.RunData({"run_id": "b", "gpu_name": "NVIDIA H200", "device": "cuda", "driver": "580"}, None,
                           pd.DataFrame())
    prints = history_view.fingerprints({"tiny": cpu, "8B": gpu})
    assert prints.to_dict("records")[1] == {"run": "8B", "GPU / device": "NVIDIA H200", "driver": "580", "CUDA": "—",
                                            "torch": "—", "transformers": "—", "engine": "—"}
    warning = history_view.device_problem({"tiny": cpu, "8B": gpu})
    assert "different devices (NVIDIA H200: 8B; cpu: tiny)" in warning
    assert history_view.device_problem({"tiny": cpu, "again": cpu}) is None


def test_a_cpu_run_or_scattered_repeats_get_a_noise_warning() -> None:
    table = pd.DataFrame({"x": [1.0, 2.0], "status": ["ok", "ok"], "output_tokens_per_s": [600.0, 900.0],
                          "output_tokens_per_s_min": [28.0, 880.0], "output_tokens_per_s_max": [728.0, 910.0]})
    warning = run_view.noise_warning({"env": {"device": "cpu", "cpu_count": 2}}, table, BATCH)
    assert warning.startswith("This run measured a CPU with 2 cores")
    assert "repeats differ by up to 117 % of the median (batch 1: 28–728 tok/s)" in warning
    tight = table.assign(output_tokens_per_s_min=[590.0, 880.0], output_tokens_per_s_max=[610.0, 910.0])
    assert run_view.noise_warning({"env": {"device": "cuda"}}, tight, BATCH) is None


def test_the_device_field_offers_the_ray_clusters_gpu_types_and_sends_a_sweep_there() -> None:
    from batchscope.backends.ray_cluster import GpuType
    from batchscope.ui import form_state

    assert form.device_choices(None, "auto") == {"auto": "auto", "cuda": "cuda", "cpu": "cpu"}
    cluster = [GpuType("A100", total=8, free=3, free_on_one_node=2, per_node=4), GpuType("H200", 2, 2, 2, 2)]
    assert list(form.device_choices(cluster, "cpu").items())[3:] == [
        ("ray:A100", "A100 on the Ray cluster: 3 of 8 free, 2 on one node"),
        ("ray:H200", "H200 on the Ray cluster: 2 of 2 free")]
    assert form.device_choices(cluster, "ray:L4")["ray:L4"] == "L4 on the Ray cluster (not there now)"
    on_cluster = tiny_form(device="ray:H200")
    spec = on_cluster.spec_dict()
    assert (spec["device"], spec["cluster_gpu"]) == ("cuda", "H200") and "cluster_gpu" not in tiny_form().spec_dict()
    assert form.check(on_cluster, cluster) == {}
    assert form.check(on_cluster, []) == {"device": "the Ray cluster has no H200 GPU (it has: none)"}
    again = form_state.form_from_spec({**spec, "batch_sizes": [1, 2, 4], "run_id": "r", "created_at": "t"}, None)
    assert again.device == "ray:H200"


def test_the_run_page_says_which_cluster_node_runs_a_sweep() -> None:
    spec = {"model": "tiny", "cluster_gpu": "H200", "tensor_parallel": 2, "replicas": 1}
    assert run_view.placement_words({"state": "queued"}, {"device": "cuda"}) is None
    assert run_view.placement_words({"state": "queued"}, spec) == (
        "Waiting on the Ray cluster for 2 H200 GPUs on one node.")
    assert run_view.placement_words({"state": "running", "node": "gpu-7"}, spec) == (
        "Runs on Ray cluster node gpu-7 (2 H200 GPUs).")
    assert run_view.placement_words({"state": "done", "node": "gpu-7"}, {**spec, "tensor_parallel": 1}) == (
        "Ran on Ray cluster node gpu-7 (1 H200 GPU).")
    assert run_view.placement_words({"state": "cancelled"}, spec) == (
        "Sent to the Ray cluster for 2 H200 GPUs; it never started on a node.")


def test_cluster_gpu_types_count_the_free_gpus_of_live_nodes_by_type() -> None:
    from batchscope.backends.ray_cluster import GpuType, gpu_types, placement_problem

    def node(node_id: str, kind: str | None, gpus: int, alive: bool = True) -> dict:
        resources = {"CPU": 32.0, **({"GPU": float(gpus)} if gpus else {}), **({f"accelerator_type:{kind}": 1.0}
                                                                              if kind else {})}
        return {"NodeID": node_id, "Alive": alive, "Resources": resources}

    nodes = [node("a", "H200", 8), node("b", "H200", 4), node("c", "L4", 2), node("d", None, 0),
             node("e", "H200", 8, alive=False)]
    available = {"a": {"GPU": 1.0}, "b": {"GPU": 3.5}, "c": {}, "d": {"CPU": 4.0}}
    types = gpu_types(nodes, available)
    assert types == [GpuType("H200", total=12, free=4, free_on_one_node=3, per_node=8),
                     GpuType("L4", total=2, free=0, free_on_one_node=0, per_node=2)]
    assert placement_problem("H200", 8, types) is None
    assert placement_problem("L4", 4, types) == ("4 ranks need 4 L4 GPUs on one node; the cluster's largest L4 "
                                                 "node has 2")
    assert placement_problem("B200", 1, types) == "the Ray cluster has no B200 GPU (it has: H200, L4)"
