"""bench/refine_vs_dense.sh's reader, on the GPU host's python3 (pyarrow and the torch-free runners.spec only).

`bracket RUN SLO` prints every batch size of the SLO bracket that RUN's planned points left, as a batch list
for the dense sweep; `table OUT SLO` prints the SLO limit each sweep under OUT found, its points, the points
refinement added and its wall time, as a Markdown table for docs/benchmarks.md.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.spec.refine import Seen, Target, brackets, parse_target, slo_index


def summaries(run: Path) -> list[dict]:
    """Each finished point's summary row, in point order."""
    return [pq.read_table(f).to_pylist()[0] for f in sorted((run / "points").glob("p*.summary.parquet"))]


def seen(rows: list[dict], target: Target) -> list[Seen]:
    return [Seen(float(r["batch_size"]), r["status"] == "ok", r["output_tokens_per_s"], r[target.column])
            for r in rows]


def bracket(run: Path, target: Target) -> str:
    planned = [r for r in summaries(run) if r["added_for"] is None]
    found = [(lo, hi) for reason, lo, hi in brackets(seen(planned, target), target) if reason == "slo"]
    if not found:
        latencies = {r["batch_size"]: r[target.column] for r in planned}
        raise SystemExit(f"no SLO bracket among the planned points for {target.name}: {latencies}")
    lo, hi = found[0]
    return ",".join(str(b) for b in range(int(lo), int(hi) + 1))


def table(out: Path, target: Target) -> str:
    lines = [f"SLO {target.name}", "",
             "| sweep | batch sizes measured | added by refinement | SLO limit | wall s (load included) | state |",
             "|---|---|---|---|---|---|"]
    limits = {}
    for name in ("refined", "dense"):
        rows = summaries(out / name)
        points = sorted(seen(rows, target), key=lambda s: s.x)
        ok = [p for p in points if p.ok and p.tokens_per_s is not None]
        index = slo_index(ok, target)
        limits[name] = None if index is None else ok[index].x
        added = [str(r["batch_size"]) for r in rows if r["added_for"] is not None]
        state = json.loads((out / name / "status.json").read_text())["state"]
        wall = (out / f"{name}.wall_s").read_text().strip()
        lines.append(f"| {name} | {', '.join(str(int(p.x)) for p in points)} | {', '.join(added) or '–'} | "
                     f"{'none' if limits[name] is None else int(limits[name])} | {wall} | {state} |")
    refined, dense = limits["refined"], limits["dense"]
    within = refined is not None and dense is not None and abs(refined - dense) <= 1
    lines += ["", f"Refined limit within one batch size of the dense limit: {'yes' if within else 'no'}."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    command, path, slo = argv
    target = parse_target(slo)
    print(bracket(Path(path), target) if command == "bracket" else table(Path(path), target))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
