"""History's side-by-side: knee markers, best throughput, weights and memory split per overlaid run."""
from __future__ import annotations

import pandas as pd

from batchscope import charts
from batchscope.analysis import analyse, memory_split
from batchscope.ui.history_view import comparison_table
from batchscope.ui.run_view import RunData
from tests.test_charts import GiB, summary_table, to_dict


def overlay() -> dict[str, RunData]:
    """bf16-like: OOM from batch 256. fp8-like: 1.5× the throughput, half the weights, no OOM.

    Throughput is 900·b/(1 + b/24): a doubling from b adds 2(24 + b)/(24 + 2b) − 1, which is 15.8 %
    from 64 and 8.6 % from 128, so the plateau (10 % rule) starts at 128 when 256 was measured.
    """
    bf16 = summary_table(oom_from=256)
    fp8 = summary_table(scale=1.5).assign(mem_weights=8 * GiB)
    return {label: RunData({"run_id": label}, analyse(points, None, None), memory_split(points))
            for label, points in (("bf16", bf16), ("fp8", fp8))}


def test_comparison_table_puts_each_runs_markers_and_memory_side_by_side() -> None:
    assert list(comparison_table(overlay()).columns)[:8] == [
        "run", "best output tok/s", "best at", "working point", "weights GiB", "largest that ran", "first OOM",
        "plateau"]
    table = comparison_table(overlay()).set_index("run")
    bf16, fp8 = table.loc["bf16"], table.loc["fp8"]
    assert (bf16["plateau"], bf16["working point"], bf16["first OOM"], bf16["largest that ran"]) == ("—", "128", "256", "128")
    assert (fp8["plateau"], fp8["working point"], fp8["first OOM"], fp8["best at"]) == ("128", "128", "—", "256")
    assert fp8["best output tok/s"] == 1.5 * 900 * 256 / (1 + 256 / 24)
    assert (bf16["weights GiB"], fp8["weights GiB"]) == (16.0, 8.0)
    assert bf16["decode step ms (first point)"] == 8.12 and bf16["axis"] == "batch"


def test_memory_split_by_run_is_one_panel_per_run_on_a_shared_scale() -> None:
    runs = overlay()
    spec = to_dict(charts.memory_split_by_run({label: data.split for label, data in runs.items()}))
    assert spec["facet"]["column"]["field"] == "run" and spec["facet"]["column"]["sort"] == ["bf16", "fp8"]
    data = pd.DataFrame(spec["datasets"][spec["data"]["name"]])
    weights = data[data["series"] == "weights"].groupby("run")["value"].max()
    assert weights.to_dict() == {"bf16": 16.0, "fp8": 8.0}
    assert 256.0 not in set(data[data["run"] == "bf16"]["x"])  # the OOM point has no split to draw
