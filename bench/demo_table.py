"""The demo set's table for docs/benchmarks.md (issue 37), and its bar, from the run folders themselves.

    python bench/demo_table.py FOLDER ... [--slo ttft:95:1000]

Imports the folders into a throwaway history DB and analyses each run as the Run page does (the same
`analyse()`, SLO as given), then prints one Markdown row per run: the points measured along its axis, the
failed ones, the draws, the sweep's wall time, the knee markers, the working point, how many ok points have
a `trusted` throughput verdict (with the reasons of those that do not) and the most outlier steps in a point.
Below the table, the bar: every run ≥ 90 % trusted throughput, the continuous concurrency run at 512 clients
with no outlier step, and the folders' size against 15 MB.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from batchscope.analysis import SLO, Analysis  # noqa: E402 - the repo root first, as `python bench/...` runs
from batchscope.analysis.marker import num  # noqa: E402
from batchscope.ingest import ingest_run  # noqa: E402
from batchscope.report import analysed_run  # noqa: E402
from batchscope.store import Store  # noqa: E402
from runners.spec import SpecError  # noqa: E402
from runners.spec.refine import PLATEAU_GAIN  # noqa: E402
from runners.spec.slo import parse_slo  # noqa: E402

TRUSTED_SHARE = 0.9  # issue 37: at least this share of a run's ok points has a trusted throughput verdict
SIZE_LIMIT_MB = 15.0
CLIENTS_RUN, CLIENTS_TOP = "h200-cont-8b-bf16-chat-clients", 512


@dataclass(frozen=True)
class RunRow:
    """What the table says of one run."""

    run_id: str
    axis: str
    ok: list[float]
    failed: list[str]
    draws: int | None
    wall_s: float | None
    markers: dict[str, float | None]
    working_point: float | None
    trusted: int
    not_trusted: list[str]  # "x: the first reason", one per ok point whose throughput is not trusted (in --json)
    outlier_steps: int | None

    @property
    def trusted_share(self) -> float:
        return self.trusted / len(self.ok) if self.ok else 0.0


def row_of(run: dict, analysis: Analysis) -> RunRow:
    """One run's row from its stored facts and its analysis (the points carry their verdicts)."""
    table = analysis.table
    ok = table[table["status"] == "ok"]
    verdicts = [(x, (trust or {}).get("throughput") or {}) for x, trust in zip(ok["x"], ok["trust_metrics"])]
    draws = pd.to_numeric(ok.get("draws"), errors="coerce") if "draws" in ok else pd.Series(dtype=float)
    outliers = pd.to_numeric(ok.get("outlier_steps"), errors="coerce") if "outlier_steps" in ok else None
    return RunRow(
        run_id=run["run_id"], axis=analysis.axis.key, ok=[float(x) for x in ok["x"]],
        failed=[f"{num(x)} {status}" for x, status in zip(table["x"], table["status"]) if status != "ok"],
        draws=int(draws.sum()) if draws.notna().any() else None,
        wall_s=wall_seconds(run),
        markers={name: getattr(analysis, name).x if getattr(analysis, name) else None
                 for name in ("plateau", "kneedle", "slo_limit")},
        working_point=analysis.working_point.x if analysis.working_point else None,
        trusted=sum(v.get("level") == "trusted" for _, v in verdicts),
        not_trusted=[f"{num(x)}: {(v.get('reasons') or ['no verdict'])[0]}" for x, v in verdicts
                     if v.get("level") != "trusted"],
        outlier_steps=None if outliers is None or outliers.isna().all() else int(outliers.max()))


def wall_seconds(run: dict) -> float | None:
    """The sweep's wall time from its stored start and end (None while either is missing)."""
    start, end = (pd.to_datetime(run.get(k), errors="coerce") for k in ("started_at", "finished_at"))
    return None if pd.isna(start) or pd.isna(end) else (end - start).total_seconds()


def markdown(rows: list[RunRow]) -> list[str]:
    def x(value: float | None) -> str:
        return "–" if value is None else num(value)

    lines = ["| run | axis: ok points | failed | draws | sweep s | plateau / Kneedle / SLO limit | working point "
             "| throughput trusted | outlier steps (most) |", "|" + "---|" * 9]
    for r in rows:
        span = f"{x(min(r.ok))} … {x(max(r.ok))} ({len(r.ok)})" if r.ok else "none"
        lines.append(f"| `{r.run_id}` | {r.axis}: {span} | {', '.join(r.failed) or '–'} | "
                     f"{'–' if r.draws is None else r.draws} | {'–' if r.wall_s is None else f'{r.wall_s:.0f}'} | "
                     f"{' / '.join(x(v) for v in r.markers.values())} | {x(r.working_point)} | "
                     f"{r.trusted} of {len(r.ok)} | {'–' if r.outlier_steps is None else r.outlier_steps} |")
    return lines


def bar_lines(rows: list[RunRow], size_mb: float) -> list[str]:
    """Issue 37's bar, line by line: met or not, and what misses it."""
    short = [r for r in rows if r.trusted_share < TRUSTED_SHARE]
    lines = [f"- Throughput trusted at ≥ {TRUSTED_SHARE:.0%} of ok points in every run: "
             + ("met" if not short else "not met: " + "; ".join(
                 f"{r.run_id} {r.trusted} of {len(r.ok)} (not at {', '.join(n.split(':')[0] for n in r.not_trusted)})"
                 for r in short))]
    clients = next((r for r in rows if r.run_id == CLIENTS_RUN), None)
    if clients is None:
        lines.append(f"- {CLIENTS_RUN}: not among these folders")
    else:
        reached = CLIENTS_TOP in clients.ok
        lines.append(f"- Continuous 8B chat reaches concurrency {CLIENTS_TOP}, zero outlier steps at every point: "
                     + ("met" if reached and clients.outlier_steps == 0 else
                        f"not met (reached {num(max(clients.ok)) if clients.ok else 'nothing'}, "
                        f"outlier steps {clients.outlier_steps})"))
    lines.append(f"- Folders ≤ {SIZE_LIMIT_MB:g} MB: {size_mb:.1f} MB, "
                 + ("met" if size_mb <= SIZE_LIMIT_MB else "not met"))
    return lines


def table_of(folders: list[Path], slo: SLO) -> tuple[list[RunRow], float]:
    """Every folder imported into a throwaway DB and analysed under `slo`; and their size in MB."""
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "history.duckdb") as store:
        rows = []
        for folder in folders:
            report = ingest_run(store, folder)
            if report.warnings and store.run(report.run_id) is None:
                raise SystemExit(f"{folder}: {'; '.join(report.warnings)}")
            rows.append(row_of(*analysed_run(store, report.run_id, slo, PLATEAU_GAIN)))
    size = sum(f.stat().st_size for folder in folders for f in folder.rglob("*") if f.is_file())
    return rows, size / 1e6


def slo_option(text: str) -> SLO:
    """--slo through the runner's own parser, its message kept for argparse."""
    try:
        return parse_slo(text, "slo")
    except SpecError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path, help="run folders (data/demo/h200-*)")
    ap.add_argument("--slo", type=slo_option, default=SLO("ttft", 95, 1000.0),
                    help="the SLO the markers use (default ttft:95:1000, as the shipped set's table)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    missing = [str(f) for f in args.folders if not (f / "spec.json").is_file()]
    if missing:
        ap.error(f"not a run folder: {', '.join(missing)}")
    rows, size_mb = table_of(args.folders, args.slo)
    print("\n".join(markdown(rows) + [""] + bar_lines(rows, size_mb)))
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in rows], indent=2))


if __name__ == "__main__":
    main()
