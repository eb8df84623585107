"""The endpoint engine against a real `python -m runners serve` on loopback (tiny model, CPU): a sweep end
to end into the DB, latencies against the server engine's own times (the HTTP overhead, printed), a server
killed mid-point, and a server restarted per point from a templated command."""
from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from batchscope.ingest import ingest_run
from batchscope.jobs import JobManager
from batchscope.store import Store
from runners.engines.sse import CompletionStream
from runners.spec import validate
from tests.runner_helpers import REPO, read_status, run_runner, runner_cmd
from tests.test_pages import home, no_traceback, open_page, texts  # noqa: F401 (home is a fixture)

KEY_ENV, KEY = "BATCHSCOPE_TEST_KEY", "sk-test-7c1d0e"
TINY = ["--model", "tiny", "--dtype", "float32"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_cmd(port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "runners", "serve", *TINY, "--device", "cpu", "--port", str(port), *extra]


def start_server(port: int, *extra: str, env: dict | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(serve_cmd(port, *extra), cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"runners serve exited: {proc.stderr.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise TimeoutError("runners serve did not open its port")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def endpoint(port: int, *options: str) -> list[str]:
    return [*TINY, "--engine", "endpoint", "--url", f"http://127.0.0.1:{port}/v1", *options]


def summaries(out: Path) -> list[dict]:
    return [pq.read_table(f).to_pylist()[0] for f in sorted((out / "points").glob("*.summary.parquet"))]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """A real server that wants an API key and logs its engine's own times."""
    timings = tmp_path_factory.mktemp("server") / "timings.jsonl"
    port = free_port()
    proc = start_server(port, "--max-num-seqs", "4", "--timings", str(timings), "--api-key-env", KEY_ENV,
                        env={**os.environ, KEY_ENV: KEY})
    yield port, timings
    stop(proc)


@pytest.fixture(scope="module")
def swept(server: tuple[int, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A concurrency sweep 1, 2, 4 through the server, the key passed by its variable's name only."""
    out = tmp_path_factory.mktemp("runs") / "endpoint-run"
    done = subprocess.run(runner_cmd(out, *endpoint(server[0], "--concurrency", "1,2,4", "--num-requests", "12",
                                                    "--prompt-len", "uniform:4:40", "--output-len", "fixed:6",
                                                    "--repeats", "2", "--api-key-env", KEY_ENV)),
                          cwd=REPO, env={**os.environ, KEY_ENV: KEY}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


def test_a_concurrency_sweep_against_a_real_server_lands_in_the_db(swept: Path, server, tmp_path: Path) -> None:
    with Store(tmp_path / "history.duckdb") as store:
        report = ingest_run(store, swept)
        assert report.points_added == 3 and not report.warnings, report.warnings
        points = store.points([swept.name]).sort_values("point_index")
        requests = store.requests(swept.name)
        draws = {(r.point_index, r.repeat): r.draw for r in store.repeats([swept.name]).itertuples()}
        run = store.run(swept.name)
    assert points["status"].tolist() == ["ok"] * 3 and points["error"].isna().all()
    assert points["sweep_axis"].tolist() == ["concurrency"] * 3 and points["sweep_value"].tolist() == [1.0, 2.0, 4.0]
    assert points["batch_size"].tolist() == [1, 2, 4]
    assert points["output_tokens_per_s"].iloc[2] > points["output_tokens_per_s"].iloc[0]  # batching pays on the server
    assert run["engine"] == "endpoint" and run["mode"] == "endpoint"
    assert run["env"]["engine"].startswith(f"endpoint http://127.0.0.1:{server[0]}/v1")
    # api auto: the server answers completions, takes token ids and ignore_eos, and ends streams at [DONE]
    assert run["env"]["endpoint"] == {"api": "completions", "prompt": "ids", "length": "ignore_eos",
                                      "stream_options": True, "usage": "server", "end": "[DONE]",
                                      "prompt_tokens_added": 0}
    # token ids go as the prompt, so every request has exactly the length the workload drew
    spec = validate({k: v for k, v in json.loads((swept / "spec.json").read_text()).items()
                     if k not in ("run_id", "created_at")})
    for (point, repeat), rows in requests.groupby(["point_index", "repeat"]):
        rows = rows.sort_values("request_index")
        assert rows["request_index"].tolist() == list(range(12))
        # a measured run replays or draws requests (docs/trust.md): its draw says which
        assert rows["prompt_len"].tolist() == spec.request_lengths(12, draws[(point, repeat)])[0]
        assert rows["output_len"].tolist() == [6] * 12
    # the key was sent (the server refuses requests without it) and is written nowhere
    with pytest.raises(urllib.error.HTTPError, match="401"):
        urllib.request.urlopen(f"http://127.0.0.1:{server[0]}/v1/models", timeout=10)
    for path in swept.rglob("*"):
        assert not path.is_file() or KEY.encode() not in path.read_bytes(), path


def test_latencies_equal_the_server_engines_own_within_the_http_overhead(swept: Path, server) -> None:
    """The server logs when it took each request and when its engine made each token (one monotonic clock
    for both processes): the client's TTFT and E2E can only be longer, by the HTTP path, and its gaps
    between tokens the same give or take that path's jitter."""
    engine = {}
    for line in server[1].read_text().splitlines():
        record = json.loads(line)
        engine[record["user"]] = record
    overhead: dict[str, list[float]] = {"TTFT": [], "E2E": [], "ITL mean": []}
    for f in sorted((swept / "points").glob("*.requests.parquet")):
        for row in pq.read_table(f).to_pylist():
            own = engine[f"{swept.name}/p{row['point_index']}/r{row['repeat']}/{row['request_index']}"]
            ms = [(t - own["received"]) * 1e3 for t in own["tokens"]]
            overhead["TTFT"].append(row["ttft_ms"] - ms[0])
            overhead["E2E"].append(row["e2e_ms"] - ms[-1])
            overhead["ITL mean"].append(row["itl_ms_mean"] - statistics.fmean(b - a for a, b in zip(ms, ms[1:])))
    print("\nHTTP overhead (client − server engine), ms over", len(overhead["TTFT"]), "requests:")
    for name, values in overhead.items():
        q = statistics.quantiles(values, n=20)
        print(f"  {name:9s} median {statistics.median(values):7.3f}  P95 {q[18]:7.3f}  max {max(values):7.3f}")
    runs = sum(pq.read_table(f).to_pylist()[0]["repeats"] for f in (swept / "points").glob("*.summary.parquet"))
    assert len(overhead["TTFT"]) == runs * 12  # every measured run's requests (draws and replays)
    assert min(overhead["TTFT"]) > 0 and min(overhead["E2E"]) > 0  # never a token before the engine made it
    assert statistics.median(overhead["TTFT"]) < 25.0 and statistics.median(overhead["E2E"]) < 25.0
    assert abs(statistics.median(overhead["ITL mean"])) < 2.0


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A concurrency sweep 1, 2, 4 whose server is killed once point 1 has served its first request."""
    tmp = tmp_path_factory.mktemp("killed")
    port, timings = free_port(), tmp / "timings.jsonl"
    server = start_server(port, "--max-num-seqs", "4", "--timings", str(timings))
    out = tmp / "killed-run"
    runner = subprocess.Popen(runner_cmd(out, *endpoint(port, "--concurrency", "1,2,4", "--num-requests", "30",
                                                        "--prompt-len", "fixed:8", "--output-len", "fixed:16",
                                                        "--repeats", "1", "--warmup", "0", "--replays", "0",
                                                        "--target-interval", "0")),  # one run: the kill lands in it
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (timings.exists() and f"{out.name}/p1/r0/" in timings.read_text()):
            assert time.monotonic() < deadline and runner.poll() is None, "point 1 never served a request"
            time.sleep(0.005)
        server.kill()  # mid-point 1: its first request done, most still to come
        assert runner.wait(timeout=180) == 0, runner.stderr.read()
    finally:
        stop(server)
        stop(runner)
    return out


def test_a_server_killed_mid_point_fails_that_points_requests_and_the_sweep_goes_on(killed: Path) -> None:
    first, hit, after = summaries(killed)
    assert first["status"] == "ok" and first["error"] is None
    assert hit["status"] == "ok", hit["error"]
    failed = re.match(r"(\d+) of 30 requests failed: ", hit["error"] or "")
    assert failed and int(failed[1]) >= 20, hit["error"]
    assert "connection refused" in hit["error"]
    assert pq.read_table(killed / "points" / "p0001.requests.parquet").num_rows == 30 - int(failed[1])
    assert after["status"] == "error" and "cannot reach" in after["error"]
    assert read_status(killed)["state"] == "done" and read_status(killed)["points_done"] == 3
    assert read_status(killed)["error"].startswith("1 of 3 points failed: Unreachable: cannot reach")  # issue 38


def test_the_run_page_shows_each_points_failed_requests_and_the_server(home, killed: Path) -> None:
    ingest_run(JobManager.instance(*home).store, killed)
    at = open_page("app_pages/run.py", run=killed.name)
    no_traceback(at)
    captions = texts(at, "caption")
    assert any(re.fullmatch(r"Concurrency 2: \d+ of 30 requests failed: .*connection refused.*", c) for c in captions), captions
    assert any(c.startswith("Concurrency 4: Unreachable: cannot reach http://127.0.0.1:") for c in captions), captions
    assert any(c.startswith("Server http://127.0.0.1:") and "model its first listed" in c for c in captions), captions
    assert any(w.startswith("The sweep finished, but 1 of 3 points failed: concurrency 4, Unreachable: cannot reach")
               for w in texts(at, "warning"))


def test_each_point_restarts_the_server_with_its_knob_and_stops_it_after(tmp_path: Path) -> None:
    port = free_port()
    command = " ".join([*serve_cmd(port), "--max-num-seqs", "{max_num_seqs}"])
    out = tmp_path / "restarted"
    done = run_runner(out, *endpoint(port, "--server-command", command, "--max-num-seqs", "1,2", "--concurrency", "2",
                                     "--num-requests", "6", "--prompt-len", "fixed:8", "--output-len", "fixed:4",
                                     "--repeats", "1", "--warmup", "0"), timeout=300)
    assert done.returncode == 0, done.stderr
    rows = summaries(out)
    assert [(r["status"], r["sweep_axis"], r["max_num_seqs"], r["batch_size"]) for r in rows] == [
        ("ok", "max_num_seqs", 1, 1), ("ok", "max_num_seqs", 2, 2)]
    assert all(r["setup_ms"] > 0 for r in rows)  # the restart and readiness wait, outside every latency
    server_log = (out / "server.log").read_text()
    assert "(max_num_seqs 1," in server_log and "(max_num_seqs 2," in server_log
    assert len(re.findall(r"point \d: server started \(pid \d+\)", (out / "log.txt").read_text())) == 2
    with pytest.raises(OSError):  # the last point's server was stopped with its point
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_new_sweep_asks_for_the_server_and_its_load_and_launches_only_a_valid_one(home) -> None:
    at = open_page("app_pages/new_sweep.py")
    at.selectbox(key="engine").set_value("endpoint").run()
    no_traceback(at)
    keys = {w.key for kind in ("selectbox", "text_input", "number_input") for w in at.get(kind)}
    assert "mode" not in keys and "batch_list" not in keys and "max_num_seqs" not in keys  # a server's own limit
    assert at.text_input(key="url").value == "http://127.0.0.1:8000/v1"  # this host unless told otherwise
    assert "Memory" in [h.value for h in at.subheader] and "capacity_gib_auto" not in keys
    at.radio(key="load").set_value("Closed loop").run()
    at.text_input(key="concurrency").set_value("1,4,16")
    at.text_input(key="url").set_value("http://gpu-host:8000/v1?x=1").run()
    assert any(e.startswith("url: ") or "without ?query" in e for e in texts(at, "error")), texts(at, "error")
    assert at.button(key="launch").disabled
    at.text_input(key="url").set_value("http://gpu-host:8000/v1")
    at.text_input(key="server_command").set_value("vllm serve m --max-num-seqs {max_num_seqs}").run()
    no_traceback(at)
    at.text_input(key="max_num_seqs").set_value("64,128").run()  # the command takes the knob: it may be listed
    assert any("only one axis" in e for e in texts(at, "error")), texts(at, "error")  # clients are listed too
    at.text_input(key="concurrency").set_value("64").run()
    assert not at.button(key="launch").disabled, texts(at, "error")


def post(port: int, path: str, body: dict) -> tuple[int, bytes]:
    """POST `body` to the keyed test server: (status, raw body), an HTTP error's status included."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1{path}", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_runners_serve_answers_chat_streamed_and_whole_and_refuses_a_mistyped_field(server) -> None:
    port = server[0]
    message = {"messages": [{"role": "user", "content": "the of 7"}], "max_tokens": 3, "user": "chat-test"}
    status, raw = post(port, "/chat/completions", message)
    whole = json.loads(raw)
    assert status == 200 and whole["object"] == "chat.completion", raw
    assert whole["choices"][0]["message"]["role"] == "assistant" and len(whole["choices"][0]["message"]["content"].split()) == 3
    assert whole["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}  # 'the' 'of' and id 7
    status, raw = post(port, "/chat/completions", {**message, "stream": True, "stream_options": {"include_usage": True}})
    stream = CompletionStream(chat=True)
    stream.feed(raw, 0.0)
    assert status == 200 and stream.failure() is None and len(stream.chunk_s) == 3 and stream.count("prompt_tokens") == 3
    for path, body, param in [("/completions", {"prompt": [1, 2], "temperature": "hot"}, "temperature"),
                              ("/chat/completions", {**message, "logprobs": True}, "logprobs")]:
        status, raw = post(port, path, body)
        assert status == 400 and json.loads(raw)["error"]["param"] == param, raw


def test_a_chat_sweep_of_runners_serve_sends_words_and_forces_each_length(server, tmp_path: Path) -> None:
    out = tmp_path / "chat-run"
    done = subprocess.run(runner_cmd(out, *endpoint(server[0], "--api", "chat", "--concurrency", "2", "--num-requests", "6",
                                                    "--prompt-len", "uniform:4:12", "--output-len", "uniform:2:6",
                                                    "--repeats", "1", "--warmup", "0", "--api-key-env", KEY_ENV)),
                          cwd=REPO, env={**os.environ, KEY_ENV: KEY}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "env.json").read_text())["endpoint"] == {
        "api": "chat", "prompt": "text", "length": "ignore_eos", "stream_options": True, "usage": "server",
        "end": "[DONE]", "prompt_tokens_added": 0}  # its presets have no chat template
    spec = validate({k: v for k, v in json.loads((out / "spec.json").read_text()).items()
                     if k not in ("run_id", "created_at")})
    prompts, outputs = spec.request_lengths(6, 0)
    rows = sorted((r for r in pq.read_table(out / "points" / "p0000.requests.parquet").to_pylist() if r["repeat"] == 0),
                  key=lambda r: r["request_index"])  # the point's first measured run: draw 0
    assert [r["prompt_len"] for r in rows] == prompts  # one token a word
    assert [r["output_len"] for r in rows] == [r["generated_len"] for r in rows] == outputs  # forced
