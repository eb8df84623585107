"""Vega-Lite written as plain dicts: Altair's composition deep-copies every nested chart and took seconds
for the Run page's five panels, most of a page's time; plain dicts take milliseconds."""
from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pandas as pd

HOVER = "hover"
LEGEND = "legend"


class Datasets:
    """The datasets of one spec: each frame stored once, as JSON records, under a short name."""

    def __init__(self) -> None:
        self.values: dict[str, list[dict]] = {}

    def add(self, frame: pd.DataFrame) -> dict:
        name = f"d{len(self.values)}"
        self.values[name] = json.loads(frame.to_json(orient="records", double_precision=12))
        return {"name": name}


def quantitative(field: str, **options: Any) -> dict:
    return {"field": field, "type": "quantitative", **options}


def nominal(field: str, **options: Any) -> dict:
    return {"field": field, "type": "nominal", **options}


def when(param: str, then: Any, otherwise: Any) -> dict:
    """A value that follows a selection (the hover, or the legend click); the hover selects nothing when empty."""
    return {"condition": {"param": param, "value": then, **({"empty": False} if param == HOVER else {})},
            "value": otherwise}


def inline_datasets(spec: dict) -> dict:
    """The same drawing with its named datasets written into the layers that draw them, each once where it can
    be: a layer group takes the dataset most of its layers draw and those layers inherit it; a layer drawing
    another keeps it inline. Streamlit turns every entry of `datasets` into its own Arrow table (built on the
    server, decoded in the browser, larger than the JSON for a chart's few rows); inline rows travel in the
    spec as they are. Vega-Lite shares identical inline rows between layers as one source, as it does a named
    dataset. `spec` is left as it is."""
    datasets = spec.get("datasets") or {}
    if not datasets:
        return spec
    found = _inline({key: value for key, value in spec.items() if key != "datasets"}, datasets, inherited=None)
    left = set(_named(found)) & set(datasets)  # named where no layer's data is (a lookup's, say): kept named
    return {**found, "datasets": {name: datasets[name] for name in sorted(left)}} if left else found


def _inline(node: Any, datasets: dict[str, list[dict]], inherited: str | None) -> Any:
    """`node` with its named data written inline; `inherited`: the dataset it draws if it names none."""
    if isinstance(node, list):
        return [_inline(item, datasets, inherited) for item in node]
    if not isinstance(node, dict):
        return node
    own = _name(node.get("data"), datasets)
    if own is None and "layer" in node and "data" not in node:
        counts = Counter(_drawn(node["layer"], datasets, inherited))
        top = counts.most_common(1)[0] if counts else None
        if top is not None and top[0] is not None and top[0] != inherited and top[1] > 1:
            own = top[0]  # the group names it once; its layers that draw it inherit it
    found = {}
    for key, value in node.items():
        if key == "data" and own is not None:
            continue
        found[key] = _inline(value, datasets, own or inherited) if key in ("layer", "hconcat", "vconcat",
                                                                           "concat", "spec") else value
    if own is not None and own != inherited:
        found = {"data": {"values": datasets[own]}, **found}
    return found


def _named(node: Any) -> list[str]:
    """Every dataset name still referred to anywhere under `node`."""
    if isinstance(node, list):
        return [name for item in node for name in _named(item)]
    if not isinstance(node, dict):
        return []
    data = node.get("data")
    own = [data["name"]] if isinstance(data, dict) and isinstance(data.get("name"), str) else []
    return own + [name for key, value in node.items() if key != "data" for name in _named(value)]


def _name(data: Any, datasets: dict[str, list[dict]]) -> str | None:
    return data["name"] if isinstance(data, dict) and data.get("name") in datasets else None


def _drawn(layers: list, datasets: dict[str, list[dict]], inherited: str | None) -> list[str | None]:
    """The dataset each leaf layer under `layers` draws (a nested group's leaves counted one by one)."""
    names: list[str | None] = []
    for layer in layers:
        if not isinstance(layer, dict):
            continue
        own = _name(layer.get("data"), datasets) or (None if "data" in layer else inherited)
        names += _drawn(layer["layer"], datasets, own) if "layer" in layer else [own]
    return names
