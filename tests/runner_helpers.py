"""Launch the real runner as a subprocess, as the app and a headless GPU host do."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY = ["--model", "tiny", "--dtype", "float32", "--device", "cpu", "--engine", "hf-generate"]
# Specs for the job manager: a quick tiny CPU sweep, and one long enough that a test can act between its first
# and last point. Each point runs its repeats only (no replay, no drawing until known): measuring until known
# took a loaded CPU's batch-1 point of 256 tokens to 6 runs, 20-28 s, which every test waiting for a first
# point paid; these tests are about the job manager, not the measurement.
QUICK = {"model": "tiny", "dtype": "float32", "device": "cpu", "batch_sizes": [1, 2], "prompt_len": "fixed:16",
         "output_len": "fixed:4", "repeats": 1, "replays": 0, "target_interval": 0, "warmup": 0, "calibrate": False,
         "telemetry_hz": 20}
LONG = {**QUICK, "batch_sizes": [1, 2, 4, 8, 16, 32, 64, 128], "output_len": "fixed:256", "repeats": 2}
RUN_TIMEOUT_S = 180
# A runner sweep to signal or kill between its first and last point: each later point takes at least as long
# as the first (3 runs of 64 steps, ≥ 3 s on this CPU). Each point runs its 3 repeats only, of 64 tokens:
# with measuring until known and 256 tokens the first point, which such a test waits for, took 13-20 s.
SEVEN_POINTS = [*TINY, "--batch-sizes", "1,2,4,8,16,32,64", "--prompt-len", "fixed:64", "--output-len", "fixed:64",
                "--repeats", "3", "--replays", "0", "--target-interval", "0", "--no-calibrate"]


def runner_cmd(out: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "runners", "sweep", "--out", str(out), *options]


def run_runner(out: Path, *options: str, timeout: float = 120,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(runner_cmd(out, *options), cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=env)


def finished_tiny_run(out: Path, batch_sizes: str, repeats: int) -> Path:
    """A real finished run folder made by the runner: tiny model on the CPU, prompts of 8, outputs of 3."""
    done = run_runner(out, *TINY, "--batch-sizes", batch_sizes, "--prompt-len", "fixed:8", "--output-len", "fixed:3",
                      "--repeats", str(repeats), "--warmup", "0")
    assert done.returncode == 0, done.stderr
    return out


def start_runner(out: Path, *options: str) -> subprocess.Popen:
    return subprocess.Popen(runner_cmd(out, *options), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def read_status(out: Path) -> dict:
    return json.loads((out / "status.json").read_text())


def until(condition: Callable[[], object], timeout: float = RUN_TIMEOUT_S, what: str = "condition") -> object:
    """Poll `condition` until it returns something true, and return that; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for_points(out: Path, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(list((out / "points").glob("*.summary.parquet"))) >= count if (out / "points").is_dir() else False:
            return
        time.sleep(0.1)
    raise TimeoutError(f"{count} point(s) not finished in {timeout} s")
