"""bench/demo_table.py, the demo set's table and issue 37's bar: a shipped run's row read back against the
numbers docs/benchmarks.md gives for it, and the bar's rules on rows made by hand."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from batchscope.analysis import SLO

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo"
_spec = importlib.util.spec_from_file_location("demo_table", REPO / "bench" / "demo_table.py")
demo_table = sys.modules.setdefault("demo_table", importlib.util.module_from_spec(_spec))  # bench/ is no package
_spec.loader.exec_module(demo_table)


def row(run_id: str, ok: list[float], trusted: int, outliers: int | None = 0) -> "demo_table.RunRow":
    return demo_table.RunRow(run_id, "concurrency", ok, [], None, None, {}, None, trusted,
                             [f"{x:g}: spread" for x in ok[trusted:]], outliers)


def test_the_shipped_8b_chat_run_reads_as_its_table_in_the_benchmarks() -> None:
    rows, size_mb = demo_table.table_of([DEMO / "h200-fast-8b-bf16-chat"], SLO("ttft", 95, 1000.0))
    (r,) = rows
    # docs/benchmarks.md, "Demo set v3 on an H200, first runs": 1 … 64 (7), 128 oom, 21 draws, 254 s, 32 / 16 / 16, 16
    assert (r.axis, r.ok, r.failed) == ("batch_size", [1, 2, 4, 8, 16, 32, 64], ["128 oom"])
    assert r.markers == {"plateau": 32, "kneedle": 16, "slo_limit": 16} and r.working_point == 16
    assert round(r.wall_s) == 254 and r.outlier_steps == 0 and r.draws == 21  # measured until known
    assert r.trusted == 7 and r.not_trusted == []  # every point's throughput within its ± 5 % target
    assert 0.1 < size_mb < 1.5


def test_the_bar_names_each_run_short_of_90_percent_and_the_512_client_run() -> None:
    rows = [row("a", [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], 9),  # 90 %: met
            row("b", [1, 2, 4], 2),  # 67 %
            row(demo_table.CLIENTS_RUN, [1, 64, 512], 3, outliers=1)]
    lines = demo_table.bar_lines(rows, 16.2)
    assert lines[0].endswith("not met: b 2 of 3 (not at 4)")
    assert lines[1].endswith("not met (reached 512, outlier steps 1)")
    assert lines[2] == "- Folders ≤ 15 MB: 16.2 MB, not met"
    met = demo_table.bar_lines([row(demo_table.CLIENTS_RUN, [1, 512], 2)], 7.6)
    assert all(line.endswith("met") and "not met" not in line for line in met), met


def test_a_folder_that_is_no_run_is_refused_with_its_name(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "bench" / "demo_table.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and f"not a run folder: {tmp_path}" in done.stderr
