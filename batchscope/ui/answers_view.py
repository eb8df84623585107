"""The Run and History pages' answers beyond the curves: trust badges and their rules, the points refinement
added, the price per GPU-hour setting, and regressions against an earlier run of the same configuration."""
from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from batchscope.analysis.axis import SweepAxis, sweep_x
from batchscope.analysis.cost import parse_price, setting_key
from batchscope.analysis.regression import Comparison, compare, earlier_matches
from batchscope.analysis.trust import LEVELS, RULES
from batchscope.store import Store
from batchscope.ui.run_view import RunData
from batchscope.ui.run_view_tables import ADDED_FOR


def rules_table() -> pd.DataFrame:
    """Every trust check with its rule and thresholds, as the page's help shows them (docs/trust.md)."""
    return pd.DataFrame({"check": list(RULES), "rule and threshold": list(RULES.values())})


def trust_words(table: pd.DataFrame, axis: SweepAxis) -> str | None:
    """One line counting the points by the verdict on what the working point reads (throughput, and the SLO's
    latency), naming the ones not trusted, or None without verdicts."""
    if "trust" not in table or table["trust"].isna().all():
        return None
    judged = table.assign(x=sweep_x(table)).dropna(subset=["trust"]).sort_values("x")
    counts = judged["trust"].value_counts()
    parts = [f"{counts[level]} {level}" for level in LEVELS if level in counts]
    doubtful = [f"{axis.value(x)} ({level})" for x, level in zip(judged["x"], judged["trust"]) if level != "trusted"]
    tail = (f"; below trusted at {axis.noun} {', '.join(doubtful)}. A point is drawn hollow on the chart of each "
            f"metric whose own verdict is untrusted" if doubtful else "")
    return f"Trust: {', '.join(parts)}{tail}."


def refinement_words(table: pd.DataFrame, axis: SweepAxis) -> str | None:
    """Which points the runner's refinement added and for which bracket, or None when it added none."""
    if "added_for" not in table or table["added_for"].isna().all():
        return None
    added = table.assign(x=sweep_x(table)).dropna(subset=["added_for"]).sort_values("point_index")
    groups = [f"{', '.join(axis.value(x) for x in part['x'])} ({ADDED_FOR.get(reason, reason)})"
              for reason, part in added.groupby("added_for", sort=False)]
    return (f"The runner's refinement added {axis.noun} {'; '.join(groups)}, after the planned points: diamonds "
            f"in the charts, marked in the table.")


def stored_price(store: Store, gpu: str) -> float | None:
    """The price per GPU-hour set for this GPU type; None when none is set (or a stored one is unreadable)."""
    try:
        return parse_price(store.setting(setting_key(gpu)))
    except ValueError:
        return None


def save_price(store: Store, gpu: str, price: float | None) -> None:
    """Remember a GPU type's price for every page and the report (0 is a price: a GPU already paid for)."""
    store.set_setting(setting_key(gpu), "" if price is None else f"{price:g}")


def regressions(store: Store, run_ids: list[str], load: Callable[[str], RunData | None]) -> list[Comparison]:
    """Each listed run against the latest earlier finished run of its configuration, flagged ones first.

    Only runs that share the model, dtype, engine and device columns are read in full, so a history of
    unrelated runs costs one query; `load` analyses a run (under the page's SLO) through the run cache.
    """
    runs = store.runs()
    keys = ["model", "dtype", "engine", "gpu", "driver", "torch_version", "engine_version"]
    shared = runs[runs.duplicated(subset=keys, keep=False) & runs["state"].eq("done")]
    records = [store.run(run_id) for run_id in shared["run_id"]]
    found = []
    for run_id, baseline_id in earlier_matches([r for r in records if r is not None]).items():
        if run_id not in run_ids:
            continue
        now, then = load(run_id), load(baseline_id)
        if now is None or then is None or now.analysis is None or then.analysis is None:
            continue
        found.append(compare(now.run, now.analysis, then.run, then.analysis))
    return sorted(found, key=lambda c: not c.flagged)


def regression_words(found: Comparison, names: dict[str, str]) -> str:
    """`run B vs earlier run A: …` for the page."""
    label = "slower beyond noise" if found.slower else "moved" if found.flagged else "steady"
    return (f"{names.get(found.run_id, found.run_id)} vs the earlier {names.get(found.baseline_id, found.baseline_id)} "
            f"({label}): {' '.join(found.sentences)}")
