"""bench/refine_vs_dense.sh's reader, on the GPU host's python3 (pyarrow and the torch-free runners.spec only).

`range RUN STEP` prints every STEP-th batch size from RUN's smallest planned point to its largest (the largest
always included), as a batch list for the dense sweep: the grid a user would run over the same range;
`table OUT SLO` prints, for the refined and dense sweeps under OUT, the batch sizes
measured, the points refinement added, the model load, the measuring time (load left out), the time per
point and the SLO limit found, as a Markdown table for docs/benchmarks.md, and whether the bar holds.

Times come from the run folder: status.json's `started_at`, log.txt's `model …` line (written once the
model is loaded and the engine built) and its `point N …` lines (one as each point ends), and
`finished_at`. So the load is counted once per sweep and apart from the points.
"""
from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.spec.refine import Seen, parse_target, slo_index
from runners.spec.slo import SLO

TIME_SHARE_BAR = 0.60  # issue 36: the refined sweep's measuring time at most this share of the dense sweep's


def summaries(run: Path) -> list[dict]:
    """Each finished point's summary row, in point order."""
    return [pq.read_table(f).to_pylist()[0] for f in sorted((run / "points").glob("p*.summary.parquet"))]


def seen(rows: list[dict], target: SLO) -> list[Seen]:
    return [Seen(float(r["batch_size"]), r["status"] == "ok", r["output_tokens_per_s"], r[target.column])
            for r in rows]


def dense_grid(planned: list[int], step: int) -> list[int]:
    """Every `step`-th batch size from the least planned to the largest, the largest always in: the grid a user
    would run over the same range without refinement."""
    grid = list(range(min(planned), max(planned) + 1, step))
    return grid + ([max(planned)] if grid[-1] != max(planned) else [])


def planned_range(run: Path, step: int) -> str:
    planned = [r["batch_size"] for r in summaries(run) if r["added_for"] is None]
    return ",".join(str(b) for b in dense_grid(planned, step))


def grid_step(points: list[Seen]) -> float:
    """The dense grid's step: the smallest gap between its batch sizes (the bar's tolerance on the limit)."""
    return min(b.x - a.x for a, b in zip(points, points[1:]))


def timing(run: Path) -> tuple[float, float]:
    """(model load s, measuring s): start → the log's `model` line, that line → the run's end, or → the last
    point that ended where the run was cut short (its unfinished point not counted, nor in the point count)."""
    status = json.loads((run / "status.json").read_text())
    stamped = [(datetime.fromisoformat(stamp), text) for stamp, text in
               (line.split(" ", 1) for line in (run / "log.txt").read_text().splitlines())]
    loaded = next(at for at, text in stamped if text.startswith("model "))
    ended = (datetime.fromisoformat(status["finished_at"]) if status["finished_at"]
             else max(at for at, text in stamped if text.startswith("point ")))
    return (loaded - datetime.fromisoformat(status["started_at"])).total_seconds(), (ended - loaded).total_seconds()


def table(out: Path, target: SLO) -> str:
    lines = [f"SLO {target.rule}", "",
             "| sweep | batch sizes measured | added by refinement | points | model load s | measuring s "
             "| s per point | SLO limit | state |",
             "|---|---|---|---|---|---|---|---|---|"]
    limits, measuring, step = {}, {}, 1.0
    for name in ("refined", "dense"):
        rows = summaries(out / name)
        points = sorted(seen(rows, target), key=lambda s: s.x)
        ok = [p for p in points if p.ok and p.tokens_per_s is not None]
        index = slo_index(ok, target)
        limits[name] = None if index is None else ok[index].x
        if name == "dense":
            step = grid_step(points)
        added = [str(r["batch_size"]) for r in rows if r["added_for"] is not None]
        load_s, measuring[name] = timing(out / name)
        state = json.loads((out / name / "status.json").read_text())["state"]
        lines.append(f"| {name} | {', '.join(str(int(p.x)) for p in points)} | {', '.join(added) or '–'} | "
                     f"{len(rows)} | {load_s:.1f} | {measuring[name]:.1f} | {measuring[name] / len(rows):.1f} | "
                     f"{'none' if limits[name] is None else int(limits[name])} | {state} |")
    refined, dense = limits["refined"], limits["dense"]
    within = refined is not None and dense is not None and abs(refined - dense) <= step
    share = measuring["refined"] / measuring["dense"]
    lines += ["", f"Refined limit within one step of the dense grid ({step:g}) of the dense limit: "
                  f"{'yes' if within else 'no'}; "
                  f"refined measuring time {share:.0%} of the dense sweep's (bar ≤ {TIME_SHARE_BAR:.0%}): "
                  f"{'met' if within and share <= TIME_SHARE_BAR else 'not met'}."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[0] == "range":
        print(planned_range(Path(argv[1]), int(argv[2])))
    else:
        print(table(Path(argv[1]), parse_target(argv[2])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
