"""How far each measured draw of a static run was from the step-time model's prediction, and the interval
the `model` method (runners/metrics/interval.py) gives from those draws, beside Student's t over the draws
alone. Reads a run folder only (old runs too: each repeat was a new draw), so it shows what measuring until
known would have said of a shipped run, and docs/benchmarks.md quotes it for a fresh one.

    python3 bench/interval_from_run.py data/demo/h200-fast-8b-bf16-chat
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runners.metrics.interval import StaticDraw, by_draws, host_draws, static_interval  # noqa: E402
from runners.spec import SweepSpec  # noqa: E402


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
        draws = [StaticDraw([q["prompt_len"] for q in read["requests"] if q["repeat"] == r["repeat"]],
                            [q["output_len"] for q in read["requests"] if q["repeat"] == r["repeat"]],
                            r["prefill_ms"], r["output_tokens_per_s"]) for r in firsts]
        steps = [s["duration_ms"] for s in read["steps"] if s["phase"] == "decode"
                 and any(s["repeat"] == r["repeat"] for r in firsts)]
        size = summary["batch_size"]
        model = static_interval(draws, steps, host_draws(lambda k: spec.request_lengths(size, k)))
        alone = by_draws([d.tokens_per_s for d in draws])
        pairs = ", ".join(f"{d.tokens_per_s:.0f}/{p:.0f}" for d, p in zip(draws, model.predicted))
        lines.append(f"batch {size}: measured/predicted tok/s {pairs}; model {model.estimate:.0f} ± "
                     f"{model.half:.1%} (worst draw {model.prediction_error_max:.1%} off); draws alone "
                     f"{alone.estimate:.0f} ± {alone.half:.1%}")
    return lines


if __name__ == "__main__":
    print("\n".join(point_lines(Path(sys.argv[1]))))
