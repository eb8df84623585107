"""Vega-Lite written as plain dicts: Altair's composition deep-copies every nested chart and took seconds
for the Run page's five panels, most of a page's time; plain dicts take milliseconds."""
from __future__ import annotations

import json
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
