"""The real runner as a subprocess on the CPU tiny preset: end to end, bad input, cancel, kill, OOM."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from runners.results.schemas import DETAIL, SUMMARY
from runners.spec import problems
from tests.runner_helpers import REPO, SEVEN_POINTS, TINY, read_status, run_runner, start_runner, wait_for_points

DESIGN_METRICS = [  # docs/design.md §2 "Per point, at least"
    "batch_size", "active_seqs_mean", "active_tokens_mean", "prefill_ms", "decode_step_ms",
    *(f"{m}_ms_p{p}" for m in ("ttft", "itl", "e2e") for p in (50, 95, 99)),
    "input_tokens_per_s", "output_tokens_per_s", "requests_per_s", "prefill_padding_waste",
    "decode_padding_waste", "mem_weights", "mem_kv_allocated", "mem_kv_used", "mem_activations",
    "mem_capacity", "cpu_pct", "rss_bytes_max", "status",
]


def test_issue_command_writes_a_complete_run_folder(tmp_path):
    out = tmp_path / "demo-cpu"
    started = time.monotonic()
    result = run_runner(out, "--model", "tiny", "--dtype", "float32", "--engine", "hf-generate",
                        "--mode", "static", "--batch-sizes", "1,2,4", "--prompt-len", "fixed:32",
                        "--output-len", "fixed:8", "--repeats", "2", "--seed", "0")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 60
    assert "3/3 points" in result.stderr or "2/3 points" in result.stderr  # the progress bar ran
    status = read_status(out)
    assert status["state"] == "done" and status["points_done"] == 3 and status["error"] is None
    for name in ("spec.json", "env.json", "model.json", "calibration.json", "log.txt"):
        assert (out / name).is_file(), name
    env = json.loads((out / "env.json").read_text())
    assert env["torch"] and env["transformers"] and env["python"] and env["engine"].startswith("hf-generate")
    for index, batch in enumerate([1, 2, 4]):
        summary = pq.read_table(out / "points" / f"p{index:04d}.summary.parquet").to_pylist()[0]
        assert summary["batch_size"] == batch and summary["status"] == "ok"
        missing = [m for m in DESIGN_METRICS if summary[m] is None]
        assert not missing, f"batch {batch} lacks {missing}"
        assert summary["output_tokens_per_s_min"] <= summary["output_tokens_per_s"] <= summary["output_tokens_per_s_max"]
        requests = pq.read_table(out / "points" / f"p{index:04d}.requests.parquet")
        runs = summary["repeats"]  # 2 draws and a replay, then draws until known (6 runs at most)
        assert 3 <= runs <= 6 and runs == summary["draws"] + summary["replays"]
        assert requests.num_rows == batch * runs
        assert set(requests.column("output_len").to_pylist()) == {8}
        steps = pq.read_table(out / "points" / f"p{index:04d}.steps.parquet")
        assert steps.num_rows == runs * 8  # per run: 1 prefill + 7 decode steps
        samples = pq.read_table(out / "points" / f"p{index:04d}.samples.parquet")
        assert samples.num_rows > 0 and samples.schema.names == DETAIL["samples"].names
        assert pq.read_table(out / "points" / f"p{index:04d}.summary.parquet").schema.names == SUMMARY.names


def test_spec_file_gives_the_same_options(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": "tiny", "dtype": "float32", "device": "cpu", "batch_sizes": [1, 2],
                                "prompt_len": "uniform:4:12", "output_len": "fixed:3", "repeats": 1,
                                "calibrate": False}))
    out = tmp_path / "run"
    result = run_runner(out, "--spec", str(spec))
    assert result.returncode == 0, result.stderr
    written = json.loads((out / "spec.json").read_text())
    assert written["batch_sizes"] == [1, 2] and written["prompt_len"] == "uniform:4:12"
    assert not (out / "calibration.json").exists()
    lens = pq.read_table(out / "points" / "p0001.requests.parquet").column("prompt_len").to_pylist()
    assert all(4 <= n <= 12 for n in lens)


@pytest.mark.parametrize("options, fragment", [
    (["--batch-sizes", ""], "batch_sizes"),
    (["--batch-sizes", "0,2"], "≥ 1"),
    (["--batch-sizes", "-4"], "≥ 1"),
    (["--batch-sizes", "1,2.5"], "whole number"),
    (["--batch-sizes", "1,8", "--max-batch-size", "4"], "ceiling"),
    (["--batch-sizes", "10000"], "ceiling"),
    (["--batch-sizes", "100000"], "at most 65,536"),
    (["--model", "no-such-preset"], "unknown model"),
    (["--model", "/no/such/checkpoint"], "unknown model"),
    (["--prompt-len", "fixed:0"], "≥ 1"),
    (["--prompt-len", "fixed:4000"], "context"),
    (["--output-len", "lognormal:3000:0.1"], "context"),
    (["--prompt-len", "gauss:3:4"], "unknown distribution"),
    (["--output-len", "uniform:9:2"], "LO ≤ HI"),
    (["--repeats", "0"], "repeats"),
    (["--dtype", "float8"], "dtype"),
    (["--device", "cuda:7"], "device"),
    (["--on-oom", "explode"], "on_oom"),
    (["--seed", "100000000000000000000"], "seed"),  # the runner could not seed with it
    (["--max-batch-size", "100000000", "--batch-sizes", "100000000"], "at most 65,536"),  # once hung validation
    (["--engine", "fast", "--mode", "continuous", "--arrival", "poisson:4", "--num-requests", "1000000000"],
     "num_requests"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, options, fragment):
    out = tmp_path / "run"
    result = run_runner(out, *TINY, "--batch-sizes", "1", "--prompt-len", "fixed:8", "--output-len", "fixed:2",
                        *options, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0], lines
    assert not out.exists()


SIXTY_DIGITS = "1" + "0" * 59


@pytest.mark.parametrize("flag", ["--max-num-seqs", "--max-num-batched-tokens", "--seed"])
def test_a_sixty_digit_value_gets_one_message_from_the_flag_the_json_spec_the_form_and_serve(tmp_path, flag):
    """Issue 38: the spec's one check answers, whichever way the value comes in."""
    name = flag[2:].replace("-", "_")
    continuous = ["--engine", "fast", "--mode", "continuous", "--concurrency", "4"]
    by_flag = run_runner(tmp_path / "a", *TINY, *continuous, flag, SIXTY_DIGITS, timeout=60)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({name: int(SIXTY_DIGITS)}))
    by_json = run_runner(tmp_path / "b", *TINY, *continuous, "--spec", str(spec), timeout=60)
    served = subprocess.run([sys.executable, "-m", "runners", "serve", "--model", "tiny", flag, SIXTY_DIGITS],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    form = problems({"model": "tiny", "engine": "fast", "mode": "continuous", "concurrency": 4, name: SIXTY_DIGITS})
    assert (by_flag.returncode, by_json.returncode, served.returncode) == (2, 2, 2)
    message = form[name]
    assert message.startswith(f"{name} must be at most ") and len(message) < 200
    assert by_flag.stderr.strip() == f"error: {name}: {message}"
    assert by_json.stderr.strip() == f"error: {name}: {message}"
    assert message.endswith(f"got {SIXTY_DIGITS[:20]}… (60 digits)")
    assert served.stderr.strip().splitlines()[-1].endswith(f"argument {flag}: {message}")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_existing_run_folder_is_never_overwritten(tmp_path):
    out = tmp_path / "run"
    (out / "points").mkdir(parents=True)
    result = run_runner(out, *TINY, "--batch-sizes", "1", "--prompt-len", "fixed:8", "--output-len", "fixed:2")
    assert result.returncode == 2 and "already holds a run" in result.stderr


def test_another_sweeps_spec_and_status_are_never_overwritten(tmp_path):
    """Only a folder the app queued (spec.json + a queued status.json) may be reused as --out."""
    out = tmp_path / "run"
    out.mkdir()
    theirs = {"spec.json": json.dumps({"model": "tiny", "batch_sizes": [64]}),
              "status.json": json.dumps({"state": "cancelled", "run_id": "run", "pid": 4242})}
    for name, text in theirs.items():
        (out / name).write_text(text)
    result = run_runner(out, *TINY, "--batch-sizes", "1", "--prompt-len", "fixed:8", "--output-len", "fixed:2",
                        timeout=60)
    assert result.returncode == 2, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith(f"error: --out {out} holds another run (state cancelled)"), line
    assert {p.name: p.read_text() for p in out.iterdir()} == theirs


@pytest.mark.parametrize("where", ["/proc/batchscope-run", "a-file/run"])
def test_an_out_folder_that_cannot_be_made_is_one_line_and_exit_2(tmp_path, where):
    (tmp_path / "a-file").write_text("not a folder")
    out = tmp_path / where
    result = run_runner(out, *TINY, "--batch-sizes", "1", "--prompt-len", "fixed:8", "--output-len", "fixed:2",
                        "--no-calibrate", timeout=60)
    assert result.returncode == 2, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith(f"error: --out {out}: cannot create the run folder ("), line


def tiny_checkpoint(folder, **config) -> str:
    """A local checkpoint folder holding only a config.json: the tiny preset's shape unless overridden."""
    from runners.engines.presets import PRESETS

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**PRESETS["tiny"], **config}))
    return str(folder)


def test_a_failed_run_says_why_on_stderr(tmp_path):
    out = tmp_path / "run"
    model = tiny_checkpoint(tmp_path / "no-weights")  # a config, no weights: loading fails once the run began
    result = run_runner(out, *TINY, "--model", model, "--batch-sizes", "1", "--prompt-len", "fixed:8",
                        "--output-len", "fixed:2", "--no-calibrate")
    assert result.returncode == 1, result.stderr
    status = read_status(out)
    assert status["state"] == "failed" and status["error"]
    assert result.stderr.splitlines()[-1] == f"failed: {out}: {status['error']}"


def test_a_checkpoint_that_needs_remote_code_is_rejected_before_launch(tmp_path):
    out = tmp_path / "run"
    model = tiny_checkpoint(tmp_path / "custom", model_type="my-own-llm",
                            auto_map={"AutoConfig": "configuration_mine.MyConfig",
                                      "AutoModelForCausalLM": "modeling_mine.MyModel"})
    result = run_runner(out, *TINY, "--model", model, "--batch-sizes", "1", "--prompt-len", "fixed:8",
                        "--output-len", "fixed:2", "--no-calibrate")
    assert result.returncode == 2, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("error: model: ") and "remote code" in line, line
    assert not out.exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_ctrl_c_keep_finished_points_and_mark_cancelled(tmp_path, sig):
    """The app's Cancel (SIGTERM) and Ctrl-C in a headless sweep's terminal (SIGINT) are the same: cancelled,
    exit 3, every finished point kept whole, one line on stderr and no traceback."""
    out = tmp_path / "run"
    proc = start_runner(out, *SEVEN_POINTS)
    wait_for_points(out, 1)
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 3
    stderr = proc.stderr.read()
    assert "Traceback" not in stderr and stderr.splitlines()[-1] == f"cancelled: {out}"
    status = read_status(out)
    assert status["state"] == "cancelled" and status["finished_at"]
    summaries = sorted((out / "points").glob("*.summary.parquet"))
    assert 1 <= len(summaries) < 7 and status["points_done"] == len(summaries)
    for path in summaries:
        assert pq.read_table(path).to_pylist()[0]["status"] == "ok"
    assert not list((out / "points").glob(".*.tmp"))


def test_sigint_while_torch_loads_is_one_line_and_writes_nothing(tmp_path):
    """Before the sweep starts (the runner imports torch for seconds), Ctrl-C has nothing to keep."""
    out = tmp_path / "run"
    proc = start_runner(out, *TINY, "--batch-sizes", "1", "--prompt-len", "fixed:8", "--output-len", "fixed:2")
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + 60
    while "libtorch" not in maps.read_text():  # torch is being imported; the cancel handler comes after it
        assert time.monotonic() < deadline and proc.poll() is None, "torch never loaded"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 3
    assert proc.stderr.read().splitlines() == [f"cancelled: {out} (before the sweep started; nothing written)"]
    assert not out.exists()


@pytest.mark.alone  # the cancel is seen within 2 s
def test_sigterm_cancels_a_continuous_run_waiting_for_its_next_arrival(tmp_path):
    """At 0.01 requests/s the engine idles for minutes between arrivals; a cancel must not wait for one."""
    out = tmp_path / "run"
    proc = start_runner(out, "--model", "tiny", "--dtype", "float32", "--device", "cpu", "--engine", "fast",
                        "--mode", "continuous", "--arrival", "poisson:0.01", "--num-requests", "4",
                        "--max-num-seqs", "2", "--prompt-len", "fixed:8", "--output-len", "fixed:4",
                        "--repeats", "1", "--warmup", "0", "--no-calibrate")
    try:
        deadline = time.monotonic() + 120
        while ((read_status(out).get("current") or {}).get("stage") if (out / "status.json").exists()
               else None) != "measure":
            assert time.monotonic() < deadline and proc.poll() is None, "the repeat never started"
            time.sleep(0.1)
        time.sleep(1.0)  # the first arrivals are served; the engine sleeps until the next one
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        while read_status(out)["state"] == "running":
            assert time.monotonic() - sent < 2.0, "SIGTERM not seen while idle"  # a 0.1 s nap, plus the write-out
            time.sleep(0.02)
        assert read_status(out)["state"] == "cancelled" and proc.wait(timeout=30) == 3
    finally:
        proc.kill()  # a runner that missed the cancel would otherwise sleep on for minutes


def test_sigkill_leaves_readable_finished_points(tmp_path):
    out = tmp_path / "run"
    proc = start_runner(out, *SEVEN_POINTS)
    wait_for_points(out, 1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    status = read_status(out)
    assert status["state"] == "running" and status["pid"] == proc.pid  # the app will mark it interrupted
    for path in sorted((out / "points").glob("*.summary.parquet")):
        index = path.name.split(".")[0]
        for kind in ("requests", "steps", "samples", "repeats"):
            assert pq.read_table(out / "points" / f"{index}.{kind}.parquet").num_rows > 0


@pytest.mark.gpu
def test_real_oom_is_a_result_and_stops_the_sweep(tmp_path):
    import torch

    free, _ = torch.cuda.mem_get_info()
    # batch × (prompt + output) × 131072 B/token of KV for the 8B preset in bf16 — the largest batch asks
    # for several times the free memory, so it must OOM.
    big = max(2, int(4 * free / (131072 * 8192)))
    out = tmp_path / "run"
    result = run_runner(out, "--model", "llama-3.1-8b", "--dtype", "bfloat16", "--device", "cuda",
                        "--batch-sizes", f"1,{big},{big * 2}", "--max-batch-size", str(big * 2),
                        "--prompt-len", "fixed:8000", "--output-len", "fixed:2", "--repeats", "1",
                        "--warmup", "0", "--no-calibrate", timeout=600)
    assert result.returncode == 0, result.stderr
    status = read_status(out)
    assert status["state"] == "done" and "OOM" in (status["stopped_early"] or "")
    oom = pq.read_table(out / "points" / "p0001.summary.parquet").to_pylist()[0]
    assert oom["status"] == "oom" and "OutOfMemory" in oom["error"]
    assert not (out / "points" / "p0002.summary.parquet").exists()
    assert pq.read_table(out / "points" / "p0000.summary.parquet").to_pylist()[0]["status"] == "ok"


@pytest.mark.gpu
def test_a_sweep_on_the_second_gpu_times_its_steps_there(tmp_path):
    """On GPU 1 the step times must match GPU 0's (same model, same shape): a runner that left GPU 0
    current recorded its CUDA events there and timed nothing (0.00 ms steps on the H200 pair)."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    steps = {}
    for gpu in (0, 1):
        out = tmp_path / f"gpu{gpu}"
        result = run_runner(out, "--model", "llama-3.2-1b", "--dtype", "bfloat16", "--engine", "fast",
                            "--device", f"cuda:{gpu}", "--batch-sizes", "1,8", "--prompt-len", "fixed:128",
                            "--output-len", "fixed:32", "--repeats", "2", "--warmup", "1", "--no-calibrate",
                            timeout=600)
        assert result.returncode == 0, result.stderr
        steps[gpu] = [pq.read_table(out / "points" / f"p000{i}.summary.parquet").to_pylist()[0]["decode_step_ms"]
                      for i in (0, 1)]
    for on_0, on_1 in zip(steps[0], steps[1]):
        assert on_1 > 0.5 * on_0 and on_1 < 2 * on_0


def test_an_in_flight_atomic_write_of_the_app_does_not_block_the_runner(tmp_path):
    """The app rewrites status.json (temp file + rename) right after launching the runner; the runner
    must not take that temp file for another run's results."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "status.json").write_text(json.dumps({"state": "queued"}))
    (out / ".status.json.x1y2.tmp").write_text("{")
    result = run_runner(out, *TINY, "--batch-sizes", "1", "--prompt-len", "fixed:8", "--output-len", "fixed:2",
                        "--repeats", "1", "--no-calibrate")
    assert result.returncode == 0, result.stderr


def test_every_spec_option_is_a_flag_and_only_given_flags_reach_the_spec():
    from dataclasses import fields

    from runners.cli import _raw_spec, build_parser
    from runners.spec import SweepSpec

    parser = build_parser()
    args = parser.parse_args(["sweep", "--out", "run", "--batch-sizes", "1,2", "--no-calibrate", "--max-num-seqs", "4",
                              "--tensor-parallel", "2", "--quantize-lm-head"])
    assert _raw_spec(args) == {"batch_sizes": "1,2", "calibrate": False, "max_num_seqs": "4", "tensor_parallel": "2",
                               "quantize_lm_head": True}  # a switch that is off by default is a bare flag
    sweep_help = next(a for a in parser._actions if a.dest == "command").choices["sweep"].format_help()
    for f in fields(SweepSpec):
        flag = f"--no-{f.name}" if f.default is True else f"--{f.name}"
        assert flag.replace("_", "-") in sweep_help, f.name


def test_serve_refuses_a_quantised_lm_head_as_the_spec_does_before_loading(capsys, tmp_path):
    from runners.cli import build_parser
    from runners.engines.presets import PRESETS
    from runners.serving.serve import main

    args = build_parser().parse_args(["serve", "--model", "tiny", "--quantize-lm-head"])
    assert main(args) == 2
    assert "--quantize-lm-head: lm_head is quantised with the other weights by the fast engine" in capsys.readouterr().err
    (tmp_path / "config.json").write_text(json.dumps({**PRESETS["tiny"], "vocab_size": 32_001}))
    args = build_parser().parse_args(["serve", "--model", str(tmp_path), "--dtype", "int8", "--quantize-lm-head"])
    assert main(args) == 2
    assert "int8 needs lm_head's rows in multiples of 8" in capsys.readouterr().err
