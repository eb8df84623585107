"""Engine registry: the sweep asks for an engine by name and never imports one directly."""
from __future__ import annotations

from typing import TYPE_CHECKING

from runners.engines.base import Engine

if TYPE_CHECKING:  # the package stays torch-free: the app imports its presets, kv_layout and quant_layout
    from runners.engines.models import LoadedModel


def make_engine(name: str, loaded: LoadedModel) -> Engine:
    if name == "hf-generate":
        from runners.engines.hf_generate import HFGenerateEngine

        return HFGenerateEngine(loaded)
    if name == "fast":
        from runners.engines.fast import FastEngine

        return FastEngine(loaded)
    raise ValueError(f"unknown engine {name!r}")
