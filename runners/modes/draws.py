"""Which runs a point measures, and when it stops (docs/trust.md, "Measuring until known").

Each measured run is a (draw, replay): a draw is one set of requests drawn from the length
distribution (a static batch, or a continuous point's whole request set); a replay runs a draw's
requests again. Replays of the first draw read measurement noise; draws read workload variance.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from runners.metrics.interval import Interval
from runners.spec import SweepSpec


@dataclass(frozen=True)
class Run:
    """A measured run: its number (the repeat column), the draw it ran, and which replay of it."""

    number: int
    draw: int
    replay: int


def planned(spec: SweepSpec) -> list[tuple[int, int]]:
    """What every point runs: the first draw, its replays, then the other `repeats − 1` draws."""
    return [(0, 0)] + [(0, k) for k in range(1, spec.replays + 1)] + [(d, 0) for d in range(1, spec.repeats)]


def runs(spec: SweepSpec, interval: Callable[[], Interval], seconds: Callable[[], float]) -> Iterator[Run]:
    """The planned runs, then one new draw at a time while the interval is wider than the target and
    neither budget (`most_runs`, `point_budget_s`) is spent."""
    done = 0
    for draw, replay in planned(spec):
        yield Run(done, draw, replay)
        done += 1
    draw = spec.repeats
    while (spec.target_interval > 0 and done < spec.most_runs() and seconds() < spec.point_budget_s
           and not interval().within(spec.target_interval)):
        yield Run(done, draw, 0)
        done, draw = done + 1, draw + 1


def outcome(spec: SweepSpec, found: Interval, made: list[Run], seconds: float) -> dict[str, object]:
    """The summary columns that say how the point was measured: draws, replays, and the budget that ran
    out before the interval reached the target (None when it did, or when no target was set)."""
    spent = None
    if spec.target_interval > 0 and not found.within(spec.target_interval):
        spent = "draws" if len(made) >= spec.most_runs() else "time" if seconds >= spec.point_budget_s else None
    return {"draws": sum(r.replay == 0 for r in made), "replays": sum(r.replay > 0 for r in made),
            "target_interval": spec.target_interval or None, "budget_spent": spent}


def replay_spread(tput: dict[Run, float]) -> float | None:
    """(max − min) ÷ median throughput of the first draw's runs (itself and its replays): measurement noise
    alone, the requests being the same. None without a replay."""
    same = [v for run, v in tput.items() if run.draw == 0]
    return (max(same) - min(same)) / statistics.median(same) if len(same) > 1 else None


def words(columns: dict[str, object]) -> str:
    """The log's account of how a point was measured: "± 1.1 % (model) over 3 draws and 1 replay", and the
    budget that ran out first, if one did."""
    half = columns.get("tokens_per_s_interval")
    known = "no interval" if half is None else f"± {float(half):.1%} ({columns['interval_method']})"
    replays = columns["replays"]
    text = f"{known} over {columns['draws']} draws and {replays} replay{'' if replays == 1 else 's'}"
    spent = columns.get("budget_spent")
    return text + (f"; the {'draw' if spent == 'draws' else 'time'} budget ran out first" if spent else "")
