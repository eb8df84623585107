"""How far each measured draw of a static run, or of an open-loop continuous run, was from its model's
prediction, and the interval the `model` method (runners/metrics/interval.py) or the `queue` method
(runners/metrics/open_loop.py) gives from those draws, beside Student's t over the draws alone. Reads a run
folder only (old runs too: each repeat was a new draw), so it shows what measuring until known would have said
of a shipped run, and docs/benchmarks.md quotes it for a fresh one.

    python3 bench/interval_from_run.py data/demo/h200-fast-8b-bf16-chat
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runners.metrics.interval import Interval, StaticDraw, by_draws, host_draws, static_interval  # noqa: E402
from runners.metrics.open_loop import open_loop_draw, open_loop_interval  # noqa: E402
from runners.metrics.open_loop import host_draws as open_loop_host_draws  # noqa: E402
from runners.spec import SweepSpec  # noqa: E402
from runners.spec.registry import static_rows_padded  # noqa: E402


def point_lines(run: Path) -> list[str]:
    """One line per ok point: each draw's measured and predicted tok/s, and both methods' intervals."""
    raw = json.loads((run / "spec.json").read_text())
    spec = SweepSpec(**{k: v for k, v in raw.items() if k in SweepSpec.__dataclass_fields__})
    lines = []
    for file in sorted((run / "points").glob("*.summary.parquet")):
        summary = pq.read_table(file).to_pylist()[0]
        if summary["status"] != "ok":
            continue
        stem = file.name.split(".")[0]
        read = {part: pq.read_table(run / "points" / f"{stem}.{part}.parquet").to_pylist()
                for part in ("repeats", "requests", "steps")}
        firsts = [r for r in read["repeats"] if not r.get("replay")]
        mine = [[q for q in read["requests"] if q["repeat"] == r["repeat"]] for r in firsts]
        draws = [r["output_tokens_per_s"] for r in firsts]
        alone = by_draws(draws)
        if spec.mode == "static":
            label, model = f"batch {summary['batch_size']}", static(spec, summary, mine, firsts, read["steps"])
        else:  # a closed loop has no model, nor a run made before arrivals were kept: its line shows the draws twice
            label = f"{summary['sweep_axis']} {summary['sweep_value']:g}"
            modelled = summary["arrival_rate"] is not None and "arrival_ms" in read["requests"][0]
            model = open_loop(spec, summary, mine, firsts) if modelled else alone
        pairs = ", ".join(f"{d:.0f}/{p:.0f}" for d, p in zip(draws, model.predicted)) or "no model"
        worst = f" (worst draw {model.prediction_error_max:.1%} off)" if model.predicted else ""
        lines.append(f"{label}: measured/predicted tok/s {pairs}; {model.method} {model.estimate:.0f} ± "
                     f"{model.half:.1%}{worst}; draws alone {alone.estimate:.0f} ± {alone.half:.1%}")
    return lines


def static(spec: SweepSpec, summary: dict, requests: list[list[dict]], firsts: list[dict],
           steps: list[dict]) -> Interval:
    def draw(mine: list[dict], run: dict) -> StaticDraw:
        prompts = [q["prompt_len"] for q in mine]
        own = [(s["step_index"], s["duration_ms"]) for s in steps
               if s["phase"] == "decode" and s["repeat"] == run["repeat"]]
        return StaticDraw(prompts, [q["output_len"] for q in mine], run["prefill_ms"], own, run["output_tokens_per_s"])

    size = summary["batch_size"]
    return static_interval([draw(mine, r) for mine, r in zip(requests, firsts)],
                           host_draws(lambda k: spec.request_lengths(size, k)), static_rows_padded(spec.engine))


def open_loop(spec: SweepSpec, summary: dict, requests: list[list[dict]], firsts: list[dict]) -> Interval:
    return open_loop_interval([open_loop_draw(mine, r) for mine, r in zip(requests, firsts)], summary["max_num_seqs"],
                              open_loop_host_draws(spec, summary["arrival_rate"], len(requests[0])))


if __name__ == "__main__":
    print("\n".join(point_lines(Path(sys.argv[1]))))
