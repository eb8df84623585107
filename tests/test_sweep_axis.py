"""Runs whose x axis is not the batch size: a continuous sweep of the arrival rate, end to end.

A rate sweep keeps max_num_seqs (its batch_size) fixed and varies requests/s, so the knee rules,
sentences, charts, report and History must all read `sweep_value`, never the constant batch size.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from batchscope import charts
from batchscope.analysis import SLO, analyse, memory_split
from batchscope.analysis.axis import AXES, BATCH, axes_of, axis_of, sweep_x
from batchscope.charts import frames
from batchscope.ingest import ingest_run
from batchscope.report import Report, points_table, to_markdown
from batchscope.ui import history_view, run_view
from tests.runner_helpers import run_runner
from batchscope.analysis.model_facts import model_facts
from batchscope.analysis.roofline import roofline_table
from tests.test_charts import CALIBRATION, summary_table, to_dict
from tests.test_pages import home, manager, no_traceback, open_page, texts  # noqa: F401 (fixtures)

RATES = [0.5, 1.0, 2.0, 4.0, 8.0]
RATE = AXES["arrival_rate"]


def rate_points() -> pd.DataFrame:
    """Five points at max_num_seqs 8: throughput follows the offered load, then saturates past 2 req/s;
    P95 E2E latency explodes once the queue builds."""
    table = summary_table(points=5).assign(batch_size=8, sweep_axis="arrival_rate", sweep_value=RATES,
                                           max_num_seqs=8, arrival_rate=RATES)
    tps = np.array([64.0, 128.0, 250.0, 300.0, 305.0])
    return table.assign(output_tokens_per_s=tps, output_tokens_per_s_min=tps * 0.99,
                        output_tokens_per_s_max=tps * 1.01, e2e_ms_p95=[900.0, 950.0, 1200.0, 4000.0, 20000.0])


def test_axis_reads_sweep_value_and_names_each_kind() -> None:
    static = pd.DataFrame({"batch_size": [1, 2], "sweep_axis": [None, None], "sweep_value": [np.nan, np.nan]})
    assert sweep_x(static).tolist() == [1.0, 2.0] and axis_of(static) is BATCH
    assert sweep_x(pd.DataFrame({"batch_size": [4]})).tolist() == [4.0]  # a table from before continuous mode
    rates = rate_points()
    assert sweep_x(rates).tolist() == RATES and axis_of(rates) is RATE
    assert [a.key for a in axes_of(pd.concat([static, rates]))] == ["batch_size", "arrival_rate"]
    with pytest.raises(ValueError, match="analyse one run at a time"):
        axis_of(pd.concat([static, rates]))
    assert (RATE.at(0.5), RATE.at_start(4), RATE.title) == ("arrival rate 0.5 req/s", "Arrival rate 4 req/s",
                                                             "arrival rate (req/s, log2)")
    seqs = AXES["max_num_seqs"]
    assert (seqs.at_start(64), seqs.title, BATCH.at_start(64.0), BATCH.title) == (
        "max_num_seqs 64", "max_num_seqs (log2)", "Batch 64", "batch size (log2)")


def test_rate_sweep_knee_slo_limit_and_working_point_are_rates() -> None:
    # gains per doubling: 100 %, 95 %, 20 %, 1.7 % -> the plateau starts at 4 req/s; P95 E2E <= 2 000 ms
    # holds up to 2 req/s (1 200 ms; 4 req/s takes 4 000 ms) -> working point 2 req/s.
    result = analyse(rate_points(), model_facts("llama-3.1-8b", "bfloat16"), CALIBRATION, SLO("e2e", 95, 2000))
    assert result.axis is RATE
    assert (result.plateau.x, result.slo_limit.x, result.working_point.x) == (4.0, 2.0, 2.0)
    assert result.slo_limit.sentence == ("Arrival rate 2 req/s is the largest whose P95 E2E latency (1 200 ms) "
                                         "meets the 2 000 ms SLO; arrival rate 4 req/s takes 4 000 ms (latency "
                                         "grows along arrival rate).")
    assert result.working_point.sentence.startswith("Arrival rate 2 req/s is recommended: it is the largest "
                                                    "arrival rate within the 2 000 ms P95 E2E SLO")
    assert "Doubling past arrival rate 4 req/s adds only 1.7 %" in result.plateau.sentence
    assert any(note.startswith("No roofline along arrival rate") for note in result.notes)
    assert result.table["x"].tolist() == RATES and result.table["predicted_tokens_per_s"].isna().all()
    report = to_markdown(Report(_run_record(), result))
    assert "| arrival rate | max_num_seqs |" in report and "| 0.5 req/s | 8 | ok |" in report and "ridge batch**: n/a (not a batch-size sweep)" in report


def test_online_points_floor_the_decode_step_at_their_mean_active_rows_and_predict_no_throughput() -> None:
    model = model_facts("llama-3.1-8b", "bfloat16")
    online = summary_table(points=3).assign(batch_size=[4, 8, 16], active_seqs_mean=[2.0, 3.0, 5.0],
                                            sweep_axis="max_num_seqs", sweep_value=[4.0, 8.0, 16.0])
    static_same_rows = online.assign(batch_size=[2, 3, 5], sweep_axis=None, sweep_value=np.nan)
    floors = roofline_table(online, model, CALIBRATION)
    expected = roofline_table(static_same_rows, model, CALIBRATION)
    assert np.allclose(floors["predicted_step_ms"], expected["predicted_step_ms"])
    assert floors["predicted_tokens_per_s"].isna().all() and floors["predicted_prefill_ms"].isna().all()
    assert expected["predicted_tokens_per_s"].notna().all()
    notes = analyse(online, model, CALIBRATION).notes
    assert any(n.startswith("Along max_num_seqs the roofline floors each point's decode step") for n in notes)


def test_a_max_num_seqs_sweeps_report_names_its_axis_once_and_an_unknown_server_limit_as_a_dash() -> None:
    seqs = summary_table(points=3).assign(batch_size=[4, 8, 16], max_num_seqs=[4.0, 8.0, 16.0],
                                          sweep_axis="max_num_seqs", sweep_value=[4.0, 8.0, 16.0])
    rows = points_table(analyse(seqs, None, None).table, None, AXES["max_num_seqs"])
    assert rows[0].startswith("| max_num_seqs | status |") and "| 8 | ok |" in rows[3]
    # an endpoint sweep of clients against a server it does not start: the server's limit is unknown
    clients = summary_table(points=2).assign(batch_size=[1, 2], max_num_seqs=np.nan, sweep_axis="concurrency",
                                             sweep_value=[1.0, 2.0])
    rows = points_table(analyse(clients, None, None).table, None, AXES["concurrency"])
    assert rows[0].startswith("| concurrency | max_num_seqs | status |") and rows[2].startswith("| 1 | – | ok |")


def test_rate_sweep_charts_put_requests_per_second_on_the_shared_axis() -> None:
    points = rate_points()
    analysis = analyse(points, None, None, SLO("e2e", 95, 2000))
    spec = to_dict(charts.linked_charts(analysis.table, analysis, analysis.slo, memory_split=memory_split(points)))
    x_encodings = [enc for enc in _encodings(spec) if enc.get("field") == "x"]
    assert x_encodings and {enc["title"] for enc in x_encodings if "title" in enc} == {"arrival rate (req/s, log2)"}
    assert {tuple(enc["axis"]["values"]) for enc in x_encodings if "axis" in enc} == {tuple(RATES)}
    assert {enc["axis"]["format"] for enc in x_encodings if "axis" in enc} == {"~g"}  # 0.5 must not print as 0
    latency = frames.latency_frame(analysis.table.assign(queue_ms_p95=[0.0, 0.0, 5.0, 900.0, 8000.0]), 95)
    assert latency[latency["series"] == "queue wait (in TTFT) P95"]["value"].tolist() == [5.0, 900.0, 8000.0]
    assert "queue wait (in TTFT) P95" not in set(frames.latency_frame(summary_table(points=3), 95)["series"])
    throughput = frames.throughput_frame(analysis.table)
    assert throughput[throughput["series"] == "measured"]["x"].tolist() == RATES
    assert frames.memory_frame(memory_split(points))["x"].nunique() == len(RATES)
    assert set(frames.marker_frame(analysis, analysis.table)["x"]) == {2.0, 4.0}


def test_a_real_cpu_rate_sweep_on_the_run_page_and_refused_in_a_mixed_overlay(home, tiny_run: Path,  # noqa: F811
                                                                              tmp_path: Path) -> None:
    out = tmp_path / "rate-sweep"
    done = run_runner(out, "--model", "tiny", "--dtype", "float32", "--device", "cpu", "--engine", "fast",
                      "--mode", "continuous", "--max-num-seqs", "4", "--arrival", "poisson:25,100,400",
                      "--num-requests", "12", "--prompt-len", "uniform:4:24", "--output-len", "uniform:2:6",
                      "--repeats", "2", "--warmup", "0", "--no-calibrate", timeout=300)
    assert done.returncode == 0, done.stderr
    store = manager(home).store
    assert ingest_run(store, out).points_added == 3 and ingest_run(store, tiny_run).points_added == 3
    data = run_view.load_run(store, "rate-sweep", SLO("e2e", 95, 60_000))
    assert data.analysis.axis is RATE and data.table["x"].tolist() == [25.0, 100.0, 400.0]
    assert set(data.table["batch_size"]) == {4} and (data.table["status"] == "ok").all()
    assert data.analysis.slo_limit is not None and data.analysis.slo_limit.x in (25.0, 100.0, 400.0)

    page = open_page("app_pages/run.py", run="rate-sweep", slo="e2e:95:60000")
    no_traceback(page)
    assert not page.error, texts(page, "error")
    page.session_state["timeline_open_rate-sweep"] = True  # the steps over time are drawn once their box opens
    linked, steps = page.run().get("vega_lite_chart")
    assert "arrival rate (req/s, log2)" in linked.proto.spec
    assert "decode tokens per step" in steps.proto.spec  # a continuous point has a token mix, decode on its own scale
    assert page.selectbox(key="timeline_point_rate-sweep").options == [
        "arrival rate 25 req/s", "arrival rate 100 req/s", "arrival rate 400 req/s"]
    table = page.dataframe[0].value
    assert table["arrival req/s"].tolist() == [25.0, 100.0, 400.0] and table["queue P95 ms"].notna().all()
    assert (table["outlier steps (> 5× like steps)"] >= 0).all()  # every point counts its stalled steps
    assert "batch" not in table and table["max_num_seqs"].tolist() == [4, 4, 4]
    assert "req/s" in " ".join(texts(page, "markdown"))

    overlay = history_view.overlay_runs({"rate-sweep": "rates", "tiny-cpu": "static"},
                                      lambda run_id: run_view.load_run(store, run_id, None))
    assert "cannot share an axis" in history_view.axis_problem(overlay)
    assert history_view.axis_problem({"rates": overlay["rates"]}) is None
    history = open_page("app_pages/history.py")
    history.multiselect(key="overlay_runs").set_value(["rate-sweep", "tiny-cpu"]).run()
    no_traceback(history)
    assert "cannot share an axis" in " ".join(texts(history, "warning"))
    assert len(history.get("vega_lite_chart")) == 0
    explain = open_page("app_pages/explain.py")
    explain.selectbox(key="explain_run").set_value("rate-sweep").run()
    no_traceback(explain)
    assert "online-serving run sweeps arrival rate" in " ".join(texts(explain, "info"))


def _run_record() -> dict:
    return {"run_id": "r", "name": "rates", "model": "tiny", "dtype": "float32", "engine": "fast",
            "gpu_name": None, "state": "done", "fingerprint": None}


def _encodings(node) -> list[dict]:
    """Every `x` encoding anywhere in a compiled Vega-Lite spec."""
    found = []
    if isinstance(node, dict):
        encoding = node.get("encoding")
        if isinstance(encoding, dict) and isinstance(encoding.get("x"), dict):
            found.append(encoding["x"])
        for child in node.values():
            found += _encodings(child)
    elif isinstance(node, list):
        for child in node:
            found += _encodings(child)
    return found


def test_live_progress_names_the_point_along_its_axis() -> None:
    from runners.spec import validate

    spec = validate({"model": "tiny", "dtype": "float32", "device": "cpu", "engine": "fast", "mode": "continuous",
                     "max_num_seqs": 8, "arrival": "poisson:4,1", "num_requests": 10, "prompt_len": "fixed:8",
                     "output_len": "fixed:4", "repeats": 2}).to_dict()
    labels = run_view.point_labels({**spec, "run_id": "r", "created_at": "2026-11-29T09:00:00Z"})
    assert labels == ["arrival rate 1 req/s", "arrival rate 4 req/s"]
    current = {"point_index": 1, "batch_size": 8, "stage": "measure", "repeat": 0}
    view = run_view.progress_view({"state": "running", "points_done": 1, "points_total": 2, "current": current},
                                  2, labels)
    assert view.current == "point 2 · arrival rate 4 req/s · measuring (run 1, at most 2)"
    assert run_view.progress_view({"state": "running", "current": current}, 2).current.startswith("point 2 · batch 8")
    assert run_view.point_labels({"mode": "static", "batch_sizes": [1, 2]}) is None
