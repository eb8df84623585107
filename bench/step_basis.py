"""Re-derive a continuous run's decode step and active rows over the decode-only steps that ended in each repeat's
load window (runners/metrics/loaded.py `step_counts`, env.json `step_basis`), from the run folder's own steps and
repeats files: no new measurement. A run made before `step_basis` took its decode step over every decode-only step,
the drain's included, and its active rows over every step, so the roofline floored a drain-length step with the
load's rows (the 8B clients run read 137 % of its roofline at 512 clients on an H200; docs/benchmarks.md,
twenty-ninth session). Only those five summary columns and env.json's `step_basis` change; a run without load
windows (made before they were recorded) is left as made.

    python3 bench/step_basis.py data/demo/h200-cont-8b-bf16-chat-clients [--dry-run]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runners.metrics.loaded import STEP_BASIS, from_row, step_counts  # noqa: E402
from runners.metrics.summary import decode  # noqa: E402
from runners.results.runfolder import write_parquet  # noqa: E402


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def rederive(run: Path, write: bool) -> list[str]:
    """One line per ok point: the five columns before and after; the files rewritten when `write`."""
    env_file = run / "env.json"
    env = json.loads(env_file.read_text())
    if env.get("step_basis") == STEP_BASIS:
        return [f"{run.name}: already over {STEP_BASIS}"]
    lines = []
    for file in sorted((run / "points").glob("*.summary.parquet")):
        table = pq.read_table(file)
        summary = table.to_pylist()[0]
        if summary["status"] != "ok" or summary["sweep_axis"] is None:
            continue
        stem = file.name.split(".")[0]
        repeats = pq.read_table(run / "points" / f"{stem}.repeats.parquet").to_pylist()
        if "loaded_start_ms" not in repeats[0]:
            return [f"{run.name}: no load windows recorded; left as made"]
        load = {r["repeat"]: from_row(r) for r in repeats}
        steps = pq.read_table(run / "points" / f"{stem}.steps.parquet").to_pylist()
        after = decode([s for s in steps if s["phase"] == "decode" and step_counts(s, load[s["repeat"]])])
        lines.append(f"{run.name} {summary['sweep_axis']} {summary['sweep_value']:g}: "
                     + ", ".join(f"{k} {_cell(summary[k])} → {_cell(v)}" for k, v in after.items()))
        if write:
            write_parquet(file, [{**summary, **after}], table.schema)
    if write:
        env_file.write_text(json.dumps({**env, "step_basis": STEP_BASIS}, indent=2) + "\n")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="print the columns, rewrite nothing")
    args = parser.parse_args()
    for run in args.runs:
        print("\n".join(rederive(run, not args.dry_run)))


if __name__ == "__main__":
    main()
