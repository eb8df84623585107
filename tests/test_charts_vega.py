"""charts.vega.inline_datasets: the same drawing with each named dataset written inline, once per layer group."""
from __future__ import annotations

import copy
import json
import re

import pytest

from batchscope import charts
from batchscope.analysis import SLO, analyse, memory_split, model_facts
from batchscope.charts.vega import inline_datasets
from tests.test_charts import CALIBRATION, summary_table

A = [{"x": 1, "value": 2.0}, {"x": 2, "value": 3.0}]
B = [{"x": 1.5, "label": "knee"}]


def line(data: str | None = None, mark: str = "line") -> dict:
    return {**({"data": {"name": data}} if data else {}), "mark": mark,
            "encoding": {"x": {"field": "x", "type": "quantitative"}}}


def test_a_group_names_the_dataset_most_of_its_layers_draw_once_and_the_others_stay_inline() -> None:
    spec = {"datasets": {"d0": A, "d1": B}, "layer": [line("d0"), line("d0", "point"), line("d1", "rule")]}
    kept = copy.deepcopy(spec)
    found = inline_datasets(spec)
    assert found == {"data": {"values": A},
                     "layer": [line(), line(mark="point"), {"data": {"values": B}, **line(mark="rule")}]}
    assert spec == kept  # the spec given is not changed (pages keep it for the report and the PNG)


def test_nested_groups_inherit_from_the_outer_group_and_a_lone_layer_keeps_its_rows() -> None:
    # a panel: an inner group of the frame's layers, then a marker rule, then a pointer rule on the frame again
    panel = {"layer": [{"layer": [line("d0"), line("d0", "point")]}, line("d1", "rule"), line("d0", "rule")],
             "title": "t"}
    found = inline_datasets({"datasets": {"d0": A, "d1": B}, "vconcat": [panel, line("d1", "text")]})
    assert found == {"vconcat": [
        {"data": {"values": A}, "layer": [{"layer": [line(), line(mark="point")]},
                                          {"data": {"values": B}, **line(mark="rule")}, line(mark="rule")],
         "title": "t"},
        {"data": {"values": B}, **line(mark="text")}]}


def test_a_dataset_named_outside_a_layers_data_stays_named_and_a_spec_without_datasets_is_unchanged() -> None:
    lookup = {"lookup": "x", "from": {"data": {"name": "d1"}, "key": "x", "fields": ["label"]}}
    spec = {"datasets": {"d0": A, "d1": B}, "data": {"name": "d0"}, "transform": [lookup], **line()}
    assert inline_datasets(spec) == {"data": {"values": A}, "transform": [lookup], **line(), "datasets": {"d1": B}}
    plain = {"data": {"values": A}, **line()}
    assert inline_datasets(plain) is plain


@pytest.fixture
def linked() -> dict:
    points = summary_table(oom_from=256)
    slo = SLO("ttft", 95, 200.0)
    analysis = analyse(points, model_facts("llama-3.1-8b", "bfloat16"), CALIBRATION, slo)
    return charts.linked_charts(analysis.table, analysis, slo, memory_split=memory_split(points), run="r")


def test_the_run_pages_linked_charts_inlined_name_no_dataset_and_hold_every_row(linked: dict) -> None:
    found = inline_datasets(linked)
    text = json.dumps(found)
    assert "datasets" not in found and '"name": "d' not in text
    # every row of every dataset is still drawn; each panel's frame is written once, not once per layer
    for rows in linked["datasets"].values():
        assert json.dumps(rows)[1:-1] in text
    frame = max(linked["datasets"].values(), key=len)
    assert text.count(json.dumps(frame)[1:-1]) == 1
    assert len(text) < len(json.dumps(linked))


def test_the_inlined_linked_charts_draw_the_same_svg(linked: dict) -> None:
    vl_convert = pytest.importorskip("vl_convert")

    def svg(spec: dict) -> str:  # clip-path ids come from a counter global to the converter
        ids: dict[str, str] = {}
        text = vl_convert.vegalite_to_svg(spec)
        return re.sub(r"clip\d+", lambda m: ids.setdefault(m.group(0), f"clip{len(ids)}"), text)

    assert svg(inline_datasets(linked)) == svg(linked)

