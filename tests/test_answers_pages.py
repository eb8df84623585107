"""The answers on the pages, through Streamlit's AppTest: refinement asked for on New sweep, trust badges and
their rules on Run, a price per GPU-hour kept per GPU type with cost per 1M tokens, and History flagging a run
slower than an earlier one of the same configuration."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from batchscope.analysis import SLO
from batchscope.ingest import ingest_run
from batchscope.ui.form import SweepForm
from batchscope.ui.form_state import form_from_spec
from runners.spec import validate
from tests.test_pages import home, manager, no_traceback, open_page, texts  # noqa: F401 (fixtures)


def test_run_page_shows_trust_rules_and_cost_at_the_price_set_for_its_device(home, tiny_run: Path) -> None:  # noqa: F811
    store = manager(home).store
    ingest_run(store, tiny_run)
    page = open_page("app_pages/run.py", run="tiny-cpu")
    no_traceback(page)
    assert "Trust: " in " ".join(texts(page, "caption"))
    table = page.dataframe[0].value
    # each verdict beside the numbers it concerns, in words
    # a level, then its reason as a sentence (on a busy CPU the replays may disagree, or a step be an outlier:
    # that reason leads then)
    assert table["throughput verdict"].str.match(r"(trusted|caution|untrusted): [A-Z]").all()
    assert table["throughput verdict"].str.contains("Throughput |The same requests run|Measured steps over").all()
    assert table["latency verdict"].notna().all()
    assert list(table.columns).index("throughput verdict") == list(table.columns).index("output tok/s") + 2
    assert "cost / 1M output tokens" not in table  # no price set yet
    assert len(page.dataframe) == 1  # the trust rules wait in a closed box
    page.session_state["trust_rules_open"] = True  # opened: its table is made
    rules = page.run().dataframe[1].value
    assert {"percentile sample", "throughput interval", "measurement noise"} <= set(rules["check"])
    assert rules["rule and threshold"].str.len().min() > 40
    page.number_input(key="gpu_hour_price_cpu").set_value(3.6).run()
    no_traceback(page)
    assert store.setting("gpu_hour_price:cpu") == "3.6"
    costed = page.dataframe[0].value
    tput = costed["output tok/s"].astype(float)
    # $3.60 per hour ÷ (tok/s × 3600 s) × 1e6, rounded as the table shows it
    expected = (3.6 / (tput * 3600) * 1e6).tolist()
    assert [round(a / b, 1) for a, b in zip(costed["cost / 1M output tokens"], expected)] == [1.0] * len(expected)
    assert any("At the working point: $" in text for text in texts(page, "markdown"))
    again = open_page("app_pages/run.py", run="tiny-cpu")  # a new session reads the stored price
    assert again.number_input(key="gpu_hour_price_cpu").value == 3.6


@pytest.mark.alone  # reads the trust verdicts of the session's tiny CPU run, which a neighbour's load withholds
def test_history_flags_a_run_slower_than_an_earlier_one_of_the_same_configuration(home, tiny_run: Path,  # noqa: F811
                                                                                  tmp_path: Path) -> None:
    store = manager(home).store
    ingest_run(store, tiny_run)
    slower = tmp_path / "tiny-cpu-again"
    shutil.copytree(tiny_run, slower)
    spec = json.loads((slower / "spec.json").read_text())  # a minute later: "earlier" sorts by created_at
    later = datetime.fromisoformat(spec["created_at"]) + timedelta(minutes=1)
    spec.update(created_at=later.isoformat(), run_id="tiny-cpu-again")
    (slower / "spec.json").write_text(json.dumps(spec))
    # the same sweep a thousand times slower: beyond any spread a shared CPU gives its repeats
    for summary in (slower / "points").glob("*.summary.parquet"):
        table = pq.read_table(summary).to_pandas()
        for column in ("output_tokens_per_s", "output_tokens_per_s_min", "output_tokens_per_s_max"):
            table[column] = table[column] / 1000
        table.to_parquet(summary, index=False)
    for repeats in (slower / "points").glob("*.repeats.parquet"):
        table = pq.read_table(repeats).to_pandas()
        table["output_tokens_per_s"] = table["output_tokens_per_s"] / 1000
        table.to_parquet(repeats, index=False)
    ingest_run(store, slower)
    page = open_page("app_pages/history.py")
    no_traceback(page)
    captions = " ".join(texts(page, "caption"))
    assert "1 pair(s) compared, 1 flagged" in captions
    warning = " ".join(texts(page, "warning"))
    assert "tiny-cpu-again vs the earlier tiny-cpu (slower beyond noise): Best throughput fell 99.9 %" in warning
    page.multiselect(key="overlay_runs").set_value(["tiny-cpu", "tiny-cpu-again"]).run()
    no_traceback(page)
    side_by_side = page.dataframe[-1].value
    assert {"cost / 1M tok at working point", "working point trust"} <= set(side_by_side.columns)


def test_new_sweep_asks_the_runner_to_refine_toward_its_slo(home) -> None:  # noqa: F811
    page = open_page("app_pages/new_sweep.py")
    no_traceback(page)
    page.number_input(key="refine_points").set_value(3).run()
    no_traceback(page)
    assert not page.error, texts(page, "error")
    form = SweepForm(model="tiny", refine_points=3, slo=SLO("ttft", 95, 500.0))
    spec = validate(form.spec_dict())
    assert (spec.refine_points, spec.refine_slo) == (3, "ttft:95:500")
    assert "refine_slo" not in SweepForm(model="tiny", refine_points=3).spec_dict()  # no SLO: the knee only
    assert form_from_spec(spec.to_dict(), None).refine_points == 3  # "run this again" keeps it
