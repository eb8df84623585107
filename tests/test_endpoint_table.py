"""bench/endpoint_table.py: each repeat's own TTFT P50 per point, read from the requests' rows, the spread the
table prints beside the one P50 of all requests, and the mean and P45–P55 that show a P50 sitting on a gap."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from runners.results import contract

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("endpoint_table", REPO / "bench" / "endpoint_table.py")
endpoint_table = sys.modules.setdefault("endpoint_table", importlib.util.module_from_spec(_spec))  # bench/: no package
_spec.loader.exec_module(endpoint_table)


def point(out: Path, folder: str, ttfts_by_repeat: list[list[float | None]], tok_s: float) -> None:
    """A run folder with one ok point at concurrency 64: its summary, and one request row per TTFT given."""
    points = out / folder / "points"
    points.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{"point_index": 0, "concurrency": 64, "batch_size": None, "status": "ok",
                                          "output_tokens_per_s": tok_s, "ttft_ms_p50": 25.0, "itl_ms_p50": 6.0}]),
                   points / contract.point_file(0, "summary"))
    rows = [{"repeat": r, "ttft_ms": t} for r, ttfts in enumerate(ttfts_by_repeat) for t in ttfts]
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([("repeat", pa.int32()), ("ttft_ms", pa.float64())])),
                   points / contract.point_file(0, "requests"))


def row(out: Path, folder: str) -> dict:
    return endpoint_table.summaries(out, folder.split("-")[0], folder.split("-")[1])[64]


def test_each_repeats_ttfts_come_from_its_own_requests_and_a_failed_request_counts_in_none(tmp_path: Path) -> None:
    point(tmp_path, "inprocess-fixed-high", [[10.0, 30.0, 20.0, None], [12.0, 14.0], [40.0]], 1000.0)
    assert endpoint_table.ttfts_by_repeat(row(tmp_path, "inprocess-fixed-high")) == {
        0: [10.0, 30.0, 20.0], 1: [12.0, 14.0], 2: [40.0]}
    assert endpoint_table.spread(endpoint_table.ttfts_by_repeat(row(tmp_path, "inprocess-fixed-high"))) == "13.0–40.0"
    assert endpoint_table.ttfts_by_repeat(None) == {}


def test_a_p50_on_the_gap_between_one_and_two_waits_shows_in_p45_to_p55_and_the_mean_does_not_jump(
        tmp_path: Path) -> None:
    # 11 requests that waited one prefill (200 ms) and 9 that waited two (400 ms): the P50 (rank 9.5 of 0..19) is
    # 200; P45 at rank 8.55 → 200, P55 at rank 10.45 → 200 + 0.45 × (400 − 200) = 290; mean (11·200 + 9·400) / 20.
    point(tmp_path, "inprocess-fixed-high", [[200.0] * 11 + [400.0] * 9], 1000.0)
    by_repeat = endpoint_table.ttfts_by_repeat(row(tmp_path, "inprocess-fixed-high"))
    assert endpoint_table.mean_and_edge(by_repeat) == ("290.0", "200.0–290.0")
    assert endpoint_table.mean_and_edge({}) == ("—", "—")


def test_the_table_gives_the_per_repeat_range_and_a_dash_for_one_repeat(tmp_path: Path) -> None:
    point(tmp_path, "inprocess-fixed-high", [[10.0, 30.0, 20.0], [12.0, 14.0], [40.0]], 1000.0)
    point(tmp_path, "served-fixed-high", [[21.0, 23.0]], 950.0)
    line = next(row for row in endpoint_table.table(tmp_path, "fixed") if row.startswith("| 64 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:7] == ["64", "1,000.0 / 950.0", "0.950", "25.0 / 25.0", "13.0–40.0 / —", "21.0 / 22.0",
                         "15.5–18.5 / 21.9–22.1"]
