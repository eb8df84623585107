"""Every page through Streamlit's AppTest: empty history, stored runs, a running sweep, and bad input."""
from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pyarrow as pa
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from batchscope.analysis import SLO
from batchscope.ingest import ingest_run
from batchscope.jobs import JobManager
from batchscope.store import Store
from batchscope.ui import run_view
from runners.spec import SweepSpec
from tests.runner_helpers import REPO

PAGES = ("app_pages/new_sweep.py", "app_pages/run.py", "app_pages/history.py")
TIMEOUT_S = 60


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """A fresh history DB and runs folder, and no cached Store or JobManager from an earlier test."""
    db, runs = tmp_path / "history.duckdb", tmp_path / "runs"
    monkeypatch.setenv("BATCHSCOPE_DB", str(db))
    monkeypatch.setenv("BATCHSCOPE_RUNS", str(runs))
    monkeypatch.setenv("BATCHSCOPE_DEMO", str(tmp_path / "no-demo-runs"))
    st.cache_resource.clear()
    yield db, runs
    manager = JobManager._instances.pop((db.resolve(), runs.resolve()), None)
    if manager is not None:
        manager.shutdown()
        manager.store.close()
    st.cache_resource.clear()


def app() -> AppTest:
    return AppTest.from_file(str(REPO / "app.py"), default_timeout=TIMEOUT_S).run()


def open_page(page: str, **query: str) -> AppTest:
    at = app()
    at.switch_page(page)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def texts(at: AppTest, kind: str) -> list[str]:
    """What each element of a kind shows: markdown's backslash escapes (plain_text.plain) removed."""
    return [re.sub(r"\\(.)", r"\1", element.value) for element in getattr(at, kind)]


def no_traceback(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def chart_data(chart) -> str:
    """Every row of a drawn chart's datasets as text (Streamlit sends them apart from the spec, in Arrow)."""
    frames = [pa.ipc.open_stream(named.data.data).read_pandas() for named in chart.proto.datasets]
    return "\n".join(frame.to_csv(index=False) for frame in frames)


def manager(home: tuple[Path, Path]) -> JobManager:
    return JobManager.instance(*home)


def stored_runs(home: tuple[Path, Path]) -> list[str]:
    return manager(home).store.runs()["run_id"].tolist()


def test_every_page_renders_with_an_empty_history(home) -> None:
    at = app()
    no_traceback(at)
    assert "No runs yet" in " ".join(texts(at, "info"))
    for page in PAGES:
        at = open_page(page)
        no_traceback(at)
        assert not at.error, texts(at, "error")
    assert "No runs yet" in " ".join(texts(open_page("app_pages/run.py"), "info"))
    assert "No runs stored yet" in " ".join(texts(open_page("app_pages/history.py"), "info"))


def test_pages_with_stored_runs_show_charts_markers_table_and_overlay(home, tiny_run: Path) -> None:
    store = manager(home).store
    assert ingest_run(store, tiny_run).points_added == 3
    assert ingest_run(store, tiny_run, demo=False).points_added == 0
    at = app()
    no_traceback(at)
    assert any("tiny-cpu" in link.proto.label for link in at.get("page_link"))
    run_page = open_page("app_pages/run.py", run="tiny-cpu", slo="ttft:95:100000")
    no_traceback(run_page)
    assert len(run_page.get("vega_lite_chart")) == 1  # the linked panels; one point's steps wait in a closed box
    run_page.session_state["timeline_open_tiny-cpu"] = True  # opened: its chart is drawn
    linked, steps = run_page.run().get("vega_lite_chart")  # the four linked panels, one point's steps over time
    assert "output tokens/s" in linked.proto.spec and "time in the repeat (s)" in steps.proto.spec
    # the linked panels' rows travel in the spec (charts.vega.inline_datasets), not as one Arrow table each
    assert not linked.proto.datasets and not linked.proto.data.data
    assert '"values": [{"run": "tiny-cpu"' in linked.proto.spec
    sentences = " ".join(texts(run_page, "markdown"))
    assert "Every measured batch meets the" in sentences and "is recommended" in sentences
    assert [b.proto.label for b in run_page.get("download_button")] == [
        "Download CSV", "Download Parquet", "Download report", "Download charts as PNG"]
    assert len(run_page.dataframe) >= 1
    history = open_page("app_pages/history.py")
    no_traceback(history)
    history.multiselect(key="overlay_runs").set_value(["tiny-cpu"]).run()
    no_traceback(history)
    overlay, split = history.get("vega_lite_chart")
    assert "output tokens/s" in overlay.proto.spec and '"facet"' in split.proto.spec
    side_by_side = history.dataframe[-1].value
    assert len(side_by_side) == 1 and side_by_side["axis"].tolist() == ["batch"]
    assert side_by_side["largest that ran"].tolist() == ["4"]


def test_pages_analyse_a_stored_run_once_and_history_compares_under_one_slo(home, tiny_run: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ingest_run(manager(home).store, tiny_run)
    analysed: list[object] = []
    real = run_view.analyse
    monkeypatch.setattr(run_view, "analyse", lambda *args, **kw: analysed.append(args[3]) or real(*args, **kw))
    run_page = open_page("app_pages/run.py", run="tiny-cpu")
    for _ in range(3):
        run_page.run()  # what the 2 s refresh and every widget change do
    no_traceback(run_page)
    assert analysed == [None]
    history = open_page("app_pages/history.py")
    history.multiselect(key="overlay_runs").set_value(["tiny-cpu"]).run()
    assert analysed == [None]  # the same run under the same (no) SLO: the Run page's analysis serves
    history.toggle(key="history_slo_on").set_value(True).run()
    no_traceback(history)
    assert analysed == [None, SLO("itl", 95, 50.0)]
    assert "SLO: ITL P95 ≤ 50 ms" in chart_data(history.get("vega_lite_chart")[0])


def test_run_page_says_so_for_an_unknown_run_id(home, tiny_run: Path) -> None:
    ingest_run(manager(home).store, tiny_run)
    at = open_page("app_pages/run.py", run="no-such-run")
    no_traceback(at)
    assert "no run with id 'no-such-run'" in " ".join(texts(at, "error"))
    assert len(at.get("vega_lite_chart")) == 1  # it falls back to the newest run


def test_history_renames_deletes_after_confirmation_and_imports(home, tiny_run: Path) -> None:
    at = open_page("app_pages/history.py")
    at.text_input(key="import_path").set_value(str(home[0].parent / "nowhere"))
    at.button(key="import_button").click().run()
    assert "not a folder" in " ".join(texts(at, "error"))
    at.text_input(key="import_path").set_value(str(tiny_run))
    at.button(key="import_button").click().run()
    no_traceback(at)
    assert "Imported tiny-cpu: 3 new point(s)." in texts(at, "success")
    at.run()
    at.text_input(key="rename_text").set_value("   ")
    at.button(key="rename_button").click().run()
    assert "a run name cannot be empty" in texts(at, "error")
    assert at.text_input(key="rename_text").value == "   "  # a refused name stays, to be fixed
    at.text_input(key="rename_text").set_value("CPU baseline")
    at.button(key="rename_button").click().run()
    assert manager(home).store.run("tiny-cpu")["name"] == "CPU baseline"
    assert len(at.toast) == 1 and "Renamed to" in at.toast[0].value  # said by the callback, with no rerun after it
    assert at.text_input(key="rename_text").value == ""  # a done rename clears the field
    at.button(key="delete_button").click().run()
    assert stored_runs(home) == ["tiny-cpu"]  # asking is not deleting
    assert any("This cannot be undone" in w for w in texts(at, "warning"))
    at.button(key="delete_confirm").click().run()
    no_traceback(at)
    assert stored_runs(home) == []
    assert len(at.toast) == 1 and at.toast[0].value.startswith("Deleted tiny")
    assert tiny_run.is_dir()  # the folder stays unless asked


def test_history_filters_narrow_the_table(home, tiny_run: Path, tmp_path: Path) -> None:
    other = tmp_path / "tiny-bf16"
    shutil.copytree(tiny_run, other)
    spec = json.loads((other / "spec.json").read_text())
    (other / "spec.json").write_text(json.dumps({**spec, "dtype": "bfloat16"}))
    for folder in (tiny_run, other):
        ingest_run(manager(home).store, folder)
    at = open_page("app_pages/history.py")
    assert "2 of 2 runs match." in texts(at, "caption")
    at.multiselect(key="filter_dtype").set_value(["bfloat16"]).run()
    no_traceback(at)
    assert "1 of 2 runs match." in texts(at, "caption")
    assert at.dataframe[0].value["run id"].tolist() == ["tiny-bf16"]


BAD_INPUTS = [
    # inside the home folder, an allowed root wherever HOME is (a path outside every root is refused first)
    ("model path that does not exist", {"model_source": "Local checkpoint"},
     {"model_path": str(Path.home() / "no-such-model")}, "unknown model"),
    ("empty batch list", {"batch_mode": "Explicit list"}, {"batch_list": ""}, "no batch sizes"),
    ("non-positive batch", {"batch_mode": "Explicit list"}, {"batch_list": "0,4"}, "≥ 1"),
    ("absurd batch", {"batch_mode": "Explicit list"}, {"batch_list": "1,999999"}, "at most 65,536"),
    ("batch over the ceiling", {"batch_mode": "Explicit list"}, {"batch_list": "1,9999"}, "over the ceiling"),
    ("malformed prompt distribution", {}, {"prompt_len": "lognormal:abc:0.5"}, "not a number"),
    ("malformed output distribution", {}, {"output_len": "poisson:3"}, "unknown distribution"),
    ("lengths over the context", {}, {"prompt_len": "fixed:3000"}, "over the model's context"),
]


@pytest.mark.parametrize(("case", "radios", "text_inputs", "message"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_each_invalid_input_shows_its_message_and_launches_nothing(home, case, radios, text_inputs,
                                                                    message) -> None:
    at = open_page("app_pages/new_sweep.py")
    for key, value in radios.items():
        at.radio(key=key).set_value(value).run()
    for key, value in text_inputs.items():
        at.text_input(key=key).set_value(value)
    at.run()
    no_traceback(at)
    assert any(message in error for error in texts(at, "error")), texts(at, "error")
    assert at.button(key="launch").disabled  # AppTest, like a browser, refuses to click it
    assert stored_runs(home) == []


def test_slo_of_zero_ms_is_refused(home) -> None:
    at = open_page("app_pages/new_sweep.py")
    at.number_input(key="slo_ms").set_value(0.0).run()
    assert any("positive number of milliseconds" in e for e in texts(at, "error"))
    assert at.button(key="launch").disabled


def test_memory_estimate_warns_before_launching_a_sweep_that_will_not_fit(home) -> None:
    at = open_page("app_pages/new_sweep.py")
    at.selectbox(key="preset").set_value("llama-3.1-8b")
    at.selectbox(key="dtype").set_value("bfloat16")
    at.selectbox(key="device").set_value("cuda")  # auto on this GPU-less machine would assume its RAM
    at.number_input(key="batch_hi").set_value(1024)
    at.text_input(key="prompt_len").set_value("fixed:4096").run()
    no_traceback(at)
    assert any(w.startswith("Will not fit: batch 1024") for w in texts(at, "warning"))
    assert any("H200" in c for c in texts(at, "caption"))
    estimate = at.dataframe[0].value  # GiB at the decimals their size deserves, not float noise
    assert all(value == round(value, 2) for value in estimate["total GiB"])


def test_continuous_mode_asks_for_its_own_axis_and_predicts_memory_per_max_num_seqs(home) -> None:
    at = open_page("app_pages/new_sweep.py")
    at.selectbox(key="engine").set_value("fast")
    at.selectbox(key="mode").set_value("continuous").run()
    no_traceback(at)
    assert not at.get("radio") or all(r.key != "batch_mode" for r in at.radio)  # no unused batch range
    at.selectbox(key="preset").set_value("llama-3.1-8b")
    at.selectbox(key="dtype").set_value("bfloat16")
    at.selectbox(key="device").set_value("cuda")
    at.text_input(key="max_num_seqs").set_value("64,1024")
    at.text_input(key="prompt_len").set_value("fixed:4000").run()
    no_traceback(at)
    assert "Predicted memory per max_num_seqs" in [h.value for h in at.subheader]
    # 1 024 slots × 4 064 tokens (4 000 + 32, rounded up to 64) × 128 KiB per token ≈ 508 GiB of slot cache
    assert any(w.startswith("Will not fit: max_num_seqs 1024") for w in texts(at, "warning")), texts(at, "warning")
    assert not any("max_num_seqs 64 " in w for w in texts(at, "warning"))
    assert not at.button(key="launch").disabled, texts(at, "error")


def test_new_sweep_numbers_stop_where_the_runner_does(home) -> None:
    """Requests per repeat and the seed end at the spec's own bounds; the largest request count is refused in
    one line (it would draw too many requests) instead of drawing them for minutes."""
    at = open_page("app_pages/new_sweep.py")
    at.selectbox(key="engine").set_value("fast")
    at.selectbox(key="mode").set_value("continuous").run()
    most = {f.name: f.metadata["most"] for f in fields(SweepSpec) if "most" in f.metadata}
    assert (at.number_input(key="num_requests").max, at.number_input(key="seed").max) == (
        most["num_requests"], most["seed"])
    at.number_input(key="num_requests").set_value(most["num_requests"]).run()
    no_traceback(at)
    assert any(e.startswith("the sweep would draw") for e in texts(at, "error")), texts(at, "error")
    assert at.button(key="launch").disabled


def test_launching_a_tiny_cpu_sweep_opens_its_run_page_while_it_runs(home) -> None:
    at = open_page("app_pages/new_sweep.py")
    at.selectbox(key="dtype").set_value("float32")
    at.selectbox(key="device").set_value("cpu")
    at.radio(key="batch_mode").set_value("Explicit list").run()
    at.text_input(key="batch_list").set_value("1,2,4,8,16,32,64,128")
    at.text_input(key="prompt_len").set_value("fixed:64")
    at.text_input(key="output_len").set_value("fixed:48").run()
    assert not at.button(key="launch").disabled, texts(at, "error")
    started = time.monotonic()
    at.button(key="launch").click().run()
    assert time.monotonic() - started < 20  # launching does not wait for the sweep
    no_traceback(at)
    [run_id] = stored_runs(home)
    assert at.query_params["run"] == run_id and at.query_params["slo"] == "ttft:95:500"
    assert run_id in " ".join(texts(at, "caption"))
    running = open_page("app_pages/run.py", run=run_id)
    no_traceback(running)
    assert len(running.get("progress")) == 1
    assert any(m.label in ("Elapsed", "ETA") for m in running.metric)
    running.button(key=f"cancel_{run_id}").click().run()
    no_traceback(running)
    if manager(home).progress(run_id)["state"] == "running":  # the confirmation stays until the runner stops
        assert any(i.startswith("Cancel requested at ") for i in texts(running, "info")), texts(running, "info")
        assert running.button(key=f"cancel_{run_id}").disabled
    assert manager(home).wait(run_id, timeout=120) in ("cancelled", "done")
    finished = open_page("app_pages/run.py", run=run_id)
    no_traceback(finished)
    assert not finished.get("progress")


def test_run_page_shows_the_workload_and_runs_it_again_from_new_sweep(home, tiny_run: Path) -> None:
    ingest_run(manager(home).store, tiny_run)
    run_page = open_page("app_pages/run.py", run="tiny-cpu", slo="itl:99:250")
    captions = " ".join(texts(run_page, "caption"))
    assert "Prompts fixed:8 · outputs fixed:3 tokens · seed 0" in captions
    assert ("Each point: 2 draws and 1 replay, then more draws until the throughput is known within ± 5 % (at most 6 "
            "runs), each one batch of as many requests as the batch size (at most 6 × B measured)") in captions
    run_page.button(key="again_tiny-cpu").click().run()
    no_traceback(run_page)
    assert not run_page.warning, texts(run_page, "warning")  # no widget given two starting values
    assert [h.value for h in run_page.title] == ["New sweep"]
    filled = {key: run_page.selectbox(key=key).value for key in ("dtype", "engine", "device", "preset")}
    assert filled == {"dtype": "float32", "engine": "hf-generate", "device": "cpu", "preset": "tiny"}
    assert (run_page.number_input(key="batch_lo").value, run_page.number_input(key="batch_hi").value) == (1, 4)
    assert run_page.text_input(key="prompt_len").value == "fixed:8" and run_page.number_input(key="repeats").value == 2
    assert run_page.number_input(key="warmup").value == 0
    assert run_page.toggle(key="slo_on").value and run_page.number_input(key="slo_ms").value == 250.0
    assert not run_page.button(key="launch").disabled, texts(run_page, "error")


def test_run_page_shows_a_quantised_runs_accuracy_per_kernel_path(home, int8_run: Path) -> None:
    ingest_run(manager(home).store, int8_run)
    run_page = open_page("app_pages/run.py", run="int8-cpu")
    no_traceback(run_page)
    accuracy = next(c for c in texts(run_page, "caption") if c.startswith("Accuracy vs bfloat16: int8 weights"))
    assert "int8 weights (0.21 MB with scales;" in accuracy  # tiny: 209 536 bytes
    assert re.search(r"4 rows through dequantise \+ F\.linear: logits cosine (0\.99\d\d|1\.0000)", accuracy)
    assert re.search(r"20 rows through int_mm int8 activations: logits cosine (0\.99\d\d|1\.0000)", accuracy)
    assert "These are random weights" in accuracy
    assert "greedy tokens agree" in accuracy and "(not meaningful on random weights)" in accuracy
    [errors] = [e for e in run_page.expander if e.label == "Per-layer error of the quantised products"]
    paths = [m.value for m in errors.markdown]
    assert len(paths) == 2 and paths[0].startswith("- 4 rows through dequantise") and "over 8 products" in paths[0]
    assert "20 rows through int\\_mm int8 activations" in paths[1]
    table = errors.dataframe[0].value
    assert list(table.columns) == ["kernel path", "layer", "wqkv", "wo", "w13", "w2"] and len(table) == 4
    assert ((table[["wqkv", "wo", "w13", "w2"]] > 0.3) & (table[["wqkv", "wo", "w13", "w2"]] < 1.5)).all().all()


def test_new_sweep_batch_range_says_what_it_runs_and_names_a_bad_range_in_its_own_words(home) -> None:
    at = open_page("app_pages/new_sweep.py")
    at.number_input(key="batch_lo").set_value(3)
    at.number_input(key="batch_hi").set_value(20).run()
    assert any(c.startswith("Runs batch sizes 4, 8, 16 (3 points). From 3 and To 20 are not a power of two")
               for c in texts(at, "caption")), texts(at, "caption")
    at.number_input(key="batch_lo").set_value(0).run()
    assert at.number_input(key="batch_lo").value == 0  # the field keeps what was typed; the message says why
    assert "From must be at least 1 (it is 0)" in texts(at, "error") and at.button(key="launch").disabled
    at.number_input(key="batch_lo").set_value(8)
    at.number_input(key="batch_hi").set_value(2).run()
    assert "From (8) must not be larger than To (2)" in texts(at, "error")
    assert not any("pow2" in e for e in texts(at, "error"))


def test_new_sweep_messages_are_plain_text_and_the_preview_draws_what_the_context_check_reads(home) -> None:
    at = open_page("app_pages/new_sweep.py")
    at.text_input(key="prompt_len").set_value("uniform:1:100:").run()
    [raw] = [e.value for e in at.error]
    assert "\\:" in raw and re.search(r"(?<!\\):", raw) is None  # every colon escaped: no :100: emoji
    at.text_input(key="prompt_len").set_value("lognormal:1500:0.5").run()
    [context_error] = texts(at, "error")
    reaches = re.search(r"reaches (\d+) tokens", context_error)[1]
    longest = next(c for c in texts(at, "caption") if c.startswith("Longest request"))
    assert f"prompt + output = {int(reaches):,} tokens" in longest and "context is 2,048 tokens" in longest
    assert any("requests the sweep draws" in c for c in texts(at, "caption"))
