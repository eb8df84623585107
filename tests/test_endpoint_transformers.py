"""The endpoint engine against a server no one here wrote: `transformers serve` (transformers' own
OpenAI-compatible server, from the `transformers[serving]` extra in requirements-dev.txt) on the tiny
preset's checkpoint, written on disk with a word-level tokenizer and chat template by bench/word_checkpoint.py
(no download; bench/transformers_serve.sh serves a real preset's shape the same way on a GPU). It refuses
token ids, `ignore_eos` and `min_tokens` (HTTP 422 for an unknown field) and ends its streams without
[DONE], so both APIs' sweeps run on what the engine negotiates: text prompts, lengths the server chooses,
usage from the stream. One word is one token, so the prompt counts are exact and the chat template's two
role tokens show."""
from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from transformers.utils.import_utils import is_serve_available

from batchscope import report
from batchscope.ingest import ingest_run
from batchscope.jobs import JobManager
from batchscope.store import Store
from runners.spec import validate
from tests.runner_helpers import REPO, read_status, runner_cmd
from tests.test_endpoint import stop
from tests.test_pages import home, no_traceback, open_page, texts  # noqa: F401 (home is a fixture)

pytestmark = [pytest.mark.skipif(not is_serve_available(), reason="transformers[serving] (fastapi, uvicorn, openai) "
                                 "is not installed: requirements-dev.txt installs it"),
              pytest.mark.timeout(420)]  # the first test waits for the server and both sweeps (~1 min here)

READY_S, SWEEP_S = 90, 150
_spec = importlib.util.spec_from_file_location("word_checkpoint", REPO / "bench" / "word_checkpoint.py")
word_checkpoint = sys.modules.setdefault("word_checkpoint", importlib.util.module_from_spec(_spec))  # bench/ is no package
_spec.loader.exec_module(word_checkpoint)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def transformers_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`transformers serve` pinned to the tiny checkpoint on CPU, offline: (base URL, checkpoint)."""
    model = word_checkpoint.write("tiny", tmp_path_factory.mktemp("tiny-llama"))
    port = free_port()
    log = (tmp_path_factory.mktemp("transformers-serve") / "server.log").open("w")
    command = [sys.executable, "-c", "import sys; from transformers.cli.transformers import main; sys.exit(main())",
               "serve", str(model), "--device", "cpu", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + READY_S
        while True:
            assert proc.poll() is None, f"transformers serve exited: {Path(log.name).read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"transformers serve not ready in {READY_S} s"
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2).close()
                break
            except OSError:
                time.sleep(0.3)
        yield url, model
    finally:
        stop(proc)
        log.close()


@pytest.fixture(scope="module")
def sweeps(transformers_server: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A concurrency 1, 2 sweep of four short requests through each API: its run folder."""
    url, model = transformers_server
    folders = {}
    for api in ("chat", "completions"):
        out = tmp_path_factory.mktemp("runs") / f"transformers-{api}"
        options = ["--model", str(model), "--dtype", "float32", "--engine", "endpoint", "--url", url, "--api", api,
                   "--concurrency", "1,2", "--num-requests", "4", "--prompt-len", "uniform:4:12",
                   "--output-len", "fixed:4", "--repeats", "1", "--warmup", "0", "--request-timeout-s", "60",
                   "--replays", "0", "--target-interval", "0"]  # one run a point: this test is about the API
        done = subprocess.run(runner_cmd(out, *options), cwd=REPO, capture_output=True, text=True, timeout=SWEEP_S)
        assert done.returncode == 0 and read_status(out)["state"] == "done", done.stderr
        folders[api] = out
    return folders


@pytest.mark.parametrize("api, template_tokens", [("chat", 2), ("completions", 0)])
def test_a_sweep_of_transformers_serve_is_ok_at_every_point_with_lengths_from_usage(
        sweeps: dict[str, Path], api: str, template_tokens: int) -> None:
    out = sweeps[api]
    summaries = [pq.read_table(f).to_pylist()[0] for f in sorted((out / "points").glob("*.summary.parquet"))]
    assert [(s["status"], s["error"]) for s in summaries] == [("ok", None)] * 2
    env = json.loads((out / "env.json").read_text())
    assert env["endpoint"] == {"api": api, "prompt": "text", "length": "none", "stream_options": True, "usage": "server",
                               "end": "end of stream", "prompt_tokens_added": template_tokens}
    assert "output lengths not forced" in env["engine"]
    spec = validate({k: v for k, v in json.loads((out / "spec.json").read_text()).items()
                     if k not in ("run_id", "created_at")})
    drawn = spec.request_lengths(4, 0)[0]
    for point in (0, 1):
        rows = sorted(pq.read_table(out / "points" / f"p{point:04d}.requests.parquet").to_pylist(),
                      key=lambda r: r["request_index"])
        # the server's own prompt counts (usage): one token a word, plus the chat template's role tokens
        assert [r["prompt_len"] for r in rows] == [n + template_tokens for n in drawn]
        assert all(r["output_len"] == 4 and 1 <= r["generated_len"] <= 4 for r in rows)  # the server's choice
        repeat = pq.read_table(out / "points" / f"p{point:04d}.repeats.parquet").to_pylist()[0]
        assert repeat["output_tokens"] == sum(r["generated_len"] for r in rows) > 0


def test_the_run_page_and_the_report_say_how_requests_were_made_and_what_throughput_counts(
        home, sweeps: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = sweeps["chat"]
    ingest_run(JobManager.instance(*home).store, run)
    at = open_page("app_pages/run.py", run=run.name)
    no_traceback(at)
    captions = texts(at, "caption")
    assert any(c.startswith("Requests: chat API") and "output lengths not forced" in c for c in captions), captions
    assert any("chat template and tokenizer added +2 tokens" in c for c in captions), captions
    assert any(c.startswith("Throughput is over the tokens the server chose to generate") for c in captions), captions
    db = tmp_path / "report.duckdb"
    with Store(db) as store:
        ingest_run(store, run)
    assert report.main([run.name, "--db", str(db)]) == 0
    markdown = capsys.readouterr().out
    assert "Requests: chat API" in markdown and "Throughput is over the tokens the server chose to generate" in markdown
