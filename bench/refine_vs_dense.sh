#!/usr/bin/env bash
# Issues 21 and 36's GPU bar: a refined sweep against a dense one, as a user would run each. Llama-3.1-8B
# (random weights), fast engine, bfloat16, static batches, the chat workload (prompt lognormal:512:0.6,
# output lognormal:256:0.5), P95 TTFT SLO. The refined sweep plans the powers of two 4, 8, 16, 32 and may add
# up to 4 points; the dense sweep runs the grid a user would run over that whole planned range without
# refinement: every STEP-th batch size from 4 to 32 (STEP=2: 15 points; the bar's tolerance is one step).
# The table (bench/refine_table.py) gives each sweep's points, its model load (once per sweep, read from the
# run folder), its measuring time with the load left out, the time per point, the SLO limit found, and
# whether the refined sweep meets the bar: the dense limit ± one batch size in ≤ 60 % of its measuring time.
# Each point is two draws of its requests (--target-interval 0 --replays 0: the same runs for every point,
# so the time per point compares), no warm-up run (setup warms and captures every shape). Duration on
# one H200, measured 2026-12-03: about 4.5 minutes (6 refined points in 69 s, 13 dense ≈ 117 s, each sweep's
# start, compile and load ≈ 35 s).
# Needs only the runner's python3 (torch, transformers, pyarrow, pynvml): no duckdb, streamlit or kneed.
# Until 2026-12-03 afternoon the planned range was 4, 8, 16 and the dense grid every batch size 4…16.
# Usage: bench/refine_vs_dense.sh OUT_DIR   [MODEL=llama-3.1-8b SLO=ttft:95:500 STEP=2 PY=python3]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?give an output folder (it must not hold runs named refined or dense)}
MODEL=${MODEL:-llama-3.1-8b}
SLO=${SLO:-ttft:95:500}
PY=${PY:-python3}
STEP=${STEP:-2}
COMMON=(--model "$MODEL" --dtype bfloat16 --engine fast --mode static --prompt-len lognormal:512:0.6
        --output-len lognormal:256:0.5 --repeats 2 --replays 0 --target-interval 0 --warmup 0 --seed 0
        --no-calibrate)
mkdir -p "$OUT"
"$PY" -m runners sweep --out "$OUT/refined" "${COMMON[@]}" --batch-sizes 4,8,16,32 --refine-points 4 --refine-slo "$SLO"
"$PY" -m runners sweep --out "$OUT/dense" "${COMMON[@]}" --batch-sizes "$("$PY" bench/refine_table.py range "$OUT/refined" "$STEP")"
"$PY" bench/refine_table.py table "$OUT" "$SLO"
