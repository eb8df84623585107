"""History's side-by-side: knee markers, best throughput, weights and memory split per overlaid run."""
from __future__ import annotations

import pandas as pd

from batchscope import charts
from batchscope.analysis import analyse, memory_split
from batchscope.ui.history_view import comparison_display, comparison_table
from batchscope.ui.overlay_compare import compared, lacking, lacking_words
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
    assert list(comparison_table(overlay()).columns)[:9] == [
        "run", "best output tok/s", "best at", "working point", "output tok/s at working point",
        "P95 ITL ms at working point", "cost / 1M tok at working point", "J / token at working point",
        "tok/s per GPU at working point"]
    table = comparison_table(overlay()).set_index("run")
    bf16, fp8 = table.loc["bf16"], table.loc["fp8"]
    assert (bf16["plateau"], bf16["working point"], bf16["first OOM"], bf16["largest that ran"]) == ("—", "128", "256", "128")
    # bf16 lacks batch 256, so fp8's markers are read over 1..128 too: from 64, a doubling still adds 15.8 %
    # (no plateau), and its working point is its largest shared batch, 128, not the plateau it has at 128 alone
    assert (fp8["plateau"], fp8["working point"], fp8["first OOM"], fp8["best at"]) == ("—", "128", "—", "256")
    assert fp8["output tok/s at working point"] == 1.5 * 900 * 128 / (1 + 128 / 24)
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
    legend = spec["spec"]["encoding"]["color"]["legend"]
    assert (legend["columns"], legend["labelLimit"]) == (3, 0)  # "KV cache (allocated, unused)" is not cut


def test_the_side_by_side_says_which_values_each_run_lacks_and_compares_only_shared_ones() -> None:
    runs = overlay()
    assert lacking(runs) == {"bf16": [256.0], "fp8": []}
    assert lacking_words(runs) == ["bf16 lacks batch 256."]
    _, note = compared(runs)
    assert note == ("Knees and working points are compared over the 8 batch values every run measured (1, 2, 4, 8, "
                    "16, 32, 64, 128); each run's own are on its Run page.")
    alone = {"bf16": runs["bf16"], "again": runs["bf16"]}
    assert compared(alone)[1] is None and lacking_words(alone)[0].startswith("Every overlaid run measured the same")


def test_the_side_by_side_shows_an_empty_cell_where_a_run_has_no_value() -> None:
    shown = comparison_display(comparison_table(overlay()))
    row = shown.set_index("run").loc["bf16"]
    assert row["cost / 1M tok at working point"] == "" and row["plateau"] == "" and row["first OOM"] == "256"
    assert "None" not in shown.to_string() and "—" not in shown.to_string() and "nan" not in shown.to_string()


def test_runs_that_share_under_two_values_have_no_knee_compared_and_the_page_says_why() -> None:
    wide = summary_table(points=4)  # batch 1, 2, 4, 8
    shifted = summary_table(points=4).assign(batch_size=[8, 16, 32, 64])
    runs = {label: RunData({"run_id": label}, analyse(points, None, None), memory_split(points))
            for label, points in (("low", wide), ("high", shifted))}
    markers, note = compared(runs)
    assert note == ("Knees and working points are not compared: the runs share 1 batch value(s) (8), and a knee "
                    "needs at least two.")
    assert all(m.working_point is None for m in markers.values())
    row = comparison_display(comparison_table(runs)).set_index("run").loc["low"]
    assert row["working point"] == "" and row["output tok/s at working point"] == ""
