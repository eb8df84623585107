"""An endpoint request's TTFT part by part (issue 36), against a real `python -m runners serve` on loopback
(tiny model, CPU) and a real endpoint sweep: every request's parts exist, none is negative beyond the
clock's error, and they add up to the TTFT the client measured."""
from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from runners.results.schemas import TTFT_PARTS
from tests.runner_helpers import REPO, runner_cmd
from tests.test_endpoint import endpoint, free_port, start_server, stop

# parts whose ends are on different clocks: the offset's error moves time between these two only
CROSS_CLOCK = {"ttft_uplink_ms", "ttft_downlink_ms"}


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Concurrency 1 and 8 through a server of 4 slots, so some requests wait in its scheduler's queue."""
    port = free_port()
    server = start_server(port, "--max-num-seqs", "4")
    out = tmp_path_factory.mktemp("runs") / "ttft-parts"
    try:
        done = subprocess.run(runner_cmd(out, *endpoint(port, "--concurrency", "1,8", "--num-requests", "16",
                                                        "--prompt-len", "uniform:4:40", "--output-len", "fixed:4",
                                                        "--repeats", "1", "--replays", "0", "--target-interval",
                                                        "0")),
                              cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        yield out
    finally:
        stop(server)


def test_every_requests_ttft_parts_are_non_negative_and_add_up_to_its_ttft(swept: Path) -> None:
    summaries = [pq.read_table(f).to_pylist()[0] for f in sorted((swept / "points").glob("*.summary.parquet"))]
    assert [s["status"] for s in summaries] == ["ok", "ok"]
    error = max(s["clock_error_ms"] for s in summaries)
    assert 0 <= error < 5.0  # half the quickest loopback round trip
    rows = [r for f in sorted((swept / "points").glob("*.requests.parquet")) for r in pq.read_table(f).to_pylist()]
    assert len(rows) == 32
    for row in rows:
        for part in TTFT_PARTS:
            assert row[part] is not None, part
            assert row[part] >= (-error if part in CROSS_CLOCK else 0.0), (part, row)
        assert sum(row[part] for part in TTFT_PARTS) == pytest.approx(row["ttft_ms"], abs=1e-6)
    # 8 clients on 4 slots: requests wait for a slot; at concurrency 1 a request never does
    queued = {r["batch_size"]: max(x["ttft_queue_ms"] for x in rows if x["batch_size"] == r["batch_size"])
              for r in rows}
    assert queued[8] > 0.0 and queued[1] == 0.0
    for s in summaries:
        assert all(s[f"{part}_p50"] is not None for part in TTFT_PARTS)
