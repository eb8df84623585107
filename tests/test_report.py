"""`python -m batchscope report` against a real history DB holding one hand-made run."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from batchscope import report
from batchscope.store import Store
from tests.test_knee import POW2, SATURATING
from tests.test_slo import E2E_P95

REPO = Path(__file__).resolve().parent.parent
# 1e9 params at 2 B: a decode step with no context reads 2e9 B → 2 ms at 1e12 B/s (ridge batch 1000)
MODEL = {"name": "made-up", "params": 1e9, "weight_bytes": 2e9, "kv_bytes_per_token": 1e5, "layers": 10,
         "heads": 10, "head_dim": 100}
CALIBRATION = {"device": "Test GPU", "dtype": "bfloat16", "copy_bytes_per_s": 1e12, "matmul_flops_per_s": 1e15,
               "source": "measured", "key": "Test GPU|1.0|bfloat16"}


@pytest.fixture()
def db(tmp_path: Path) -> Path:
    """A DB with run "r1": the saturating curve (plateau 32), P95 E2E latencies, and an OOM at 512."""
    path = tmp_path / "history.duckdb"
    with Store(path) as store:
        store.upsert_run("r1", tmp_path / "r1", {"model": "made-up", "dtype": "bfloat16", "engine": "fast",
                                                 "name": "demo sweep"},
                         {"state": "done"}, None, MODEL, CALIBRATION)
        for i, (batch, tput, e2e) in enumerate(zip(POW2 + [512], SATURATING + [None], E2E_P95 + [None])):
            ok = tput is not None
            store.add_point("r1", i, pa.Table.from_pylist([{
                "point_index": i, "batch_size": batch, "status": "ok" if ok else "oom",
                "error": None if ok else "CUDA out of memory", "output_tokens_per_s": tput,
                "output_tokens_per_s_min": tput and tput * 0.99, "output_tokens_per_s_max": tput and tput * 1.01,
                "e2e_ms_p95": e2e, "decode_step_ms": 2.5 if ok else None, "active_seqs_mean": float(batch),
                "active_tokens_mean": 0.0, "prompt_len_mean": 0.0, "output_len_mean": 1.0,
                "prefill_padding_waste": 0.0, "prefill_ms": 3.0, "mem_peak_allocated": 2 * 1024**3,
            }]), {})
    return path


def test_json_report(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = report.main(["r1", "--db", str(db), "--format", "json", "--slo-metric", "e2e", "--slo-pct", "95",
                        "--slo-ms", "400"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    markers = out["markers"]
    # plateau 32 (as in test_knee); P95 E2E ≤ 400 ms up to batch 16 (300 ms), so the working point is 16
    assert markers["plateau"]["x"] == 32
    assert markers["slo_limit"]["x"] == 16
    assert markers["working_point"]["x"] == 16
    assert out["ridge_batch"] == pytest.approx(1000)
    assert out["settings"]["slo"] == {"metric": "e2e", "percentile": 95, "ms": 400.0}
    assert out["run"]["name"] == "demo sweep"
    # batch 1: predicted 2e9 B / 1e12 B/s = 2 ms vs measured 2.5 ms → 80 %, memory-bound
    first = out["points"][0]
    assert first["roofline_pct"] == pytest.approx(80.0) and first["bound"] == "memory"
    assert "Batch 512 ran out of memory; it is shown but excluded from the fits." in out["notes"]


def test_markdown_report(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main(["r1", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# demo sweep (r1)\n\nmade-up · bfloat16 · fast · unknown device · done")
    assert ("- **plateau**: batch 32. Doubling past batch 32 adds only 5 % throughput "
            "(2 200 tok/s → 2 310 tok/s), so the plateau starts at 32.") in text
    assert "- **ridge batch**: ≈ 1 000" in text
    # batch 32 row: 2200 ± 1 % spread, 2.5 ms measured vs 2 ms predicted
    assert "| 32 | ok | caution | 2 200 (2 178–2 222) | 2.5 | 2 | 80 | memory |" in text
    assert "| 512 | oom: CUDA out of memory |" in text


def test_unknown_run_exits_2(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main(["nope", "--db", str(db)]) == 2
    assert "Unknown run id 'nope'" in capsys.readouterr().err


def test_missing_db_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main(["r1", "--db", str(tmp_path / "none.duckdb")]) == 2
    assert "No history database" in capsys.readouterr().err
    assert not (tmp_path / "none.duckdb").exists()


def test_slo_options_need_a_target(db: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        report.main(["r1", "--db", str(db), "--slo-metric", "ttft"])
    assert exit_info.value.code == 2


def test_through_the_cli(db: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "batchscope", "report", "r1", "--db", str(db), "--format", "json"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["markers"]["working_point"]["x"] == 32


def test_analysis_and_report_never_load_torch() -> None:
    code = "import sys, batchscope.analysis, batchscope.report; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def _slower_copy(db: Path, run_id: str, factor: float) -> None:
    """Run `run_id`: r1's configuration and points with every throughput scaled by `factor`."""
    with Store(db) as store:
        r1 = store.run("r1")
        store.upsert_run(run_id, db.parent / run_id, {**r1["spec"], "created_at": "2027-01-01T00:00:00"},
                         {"state": "done"}, None, MODEL, CALIBRATION)
        rows = store.points(["r1"]).drop(columns=["run_id"])
        for column in ("output_tokens_per_s", "output_tokens_per_s_min", "output_tokens_per_s_max"):
            rows[column] = rows[column] * factor
        for i, row in rows.iterrows():
            store.add_point(run_id, int(row["point_index"]), pa.Table.from_pandas(rows.loc[[i]], preserve_index=False), {})


def test_baseline_flags_a_regression_headless(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _slower_copy(db, "r2", 0.9)
    assert report.main(["r2", "--db", str(db), "--baseline", "r1", "--slo-ms", "1000"]) == 0
    text = capsys.readouterr().out
    # best 2 500 ± 1 % → 2 250 ± 1 %: the spreads (2 475–2 525, 2 227.5–2 272.5) are apart
    assert "## Against baseline r1\n\n**Regression**: slower beyond noise." in text
    assert "- Best throughput fell 10 %, 2 500 tok/s (2 475–2 525 tok/s) → 2 250 tok/s" in text
    assert report.main(["r2", "--db", str(db), "--baseline", "r1", "--format", "json"]) == 0
    found = json.loads(capsys.readouterr().out)["baseline"]
    assert found["flagged"] and found["best_change"] == pytest.approx(-0.1) and found["differences"] == []
    _slower_copy(db, "r3", 1.005)
    assert report.main(["r3", "--db", str(db), "--baseline", "r1"]) == 0
    assert "Not flagged: nothing moved beyond noise." in capsys.readouterr().out
    assert report.main(["r3", "--db", str(db), "--baseline", "nope"]) == 2
    assert "Unknown run id 'nope'" in capsys.readouterr().err


def test_cost_per_million_tokens_from_the_flag_or_the_stored_price(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main(["r1", "--db", str(db), "--gpu-hour-price", "3.6"]) == 0
    text = capsys.readouterr().out
    # working point 32 at 2 200 tok/s: 3.6 / (2200 × 3600) × 1e6 = $0.4545
    assert "At the working point: $0.455 per million output tokens at $3.6 per GPU-hour × 1 GPU" in text
    assert "| cost / 1M out tok |" in text
    with Store(db) as store:
        store.set_setting("gpu_hour_price:unknown device", "7.2")
    assert report.main(["r1", "--db", str(db), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpu_hour_price"] == 7.2 and out["points"][5]["cost_per_mtok"] == pytest.approx(7.2 / (2200 * 3600) * 1e6)
    with pytest.raises(SystemExit):
        report.main(["r1", "--db", str(db), "--gpu-hour-price", "-1"])
