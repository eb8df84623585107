#!/usr/bin/env bash
# Issue 21's GPU bar: a refined sweep against a dense one. Llama-3.1-8B (random weights), fast engine,
# bfloat16, static batches, the chat workload (prompt lognormal:512:0.6, output lognormal:256:0.5),
# P95 TTFT SLO. The refined sweep runs the powers of two 4, 8, 16 and may add up to 4 points; the dense
# sweep then runs every batch size of the bracket its planned points left (the last that met the SLO to
# the first that broke it). Prints the SLO limit each found, the extra points and each sweep's wall time.
# Setup warms and captures every shape, so no warm-up repeat runs. About 3–4 minutes on an H200.
# Needs only the runner's python3 (torch, transformers, pyarrow, pynvml): no duckdb, streamlit or kneed.
# Usage: bench/refine_vs_dense.sh OUT_DIR   [MODEL=llama-3.1-8b SLO=ttft:95:500 PY=python3]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?give an output folder (it must not hold runs named refined or dense)}
MODEL=${MODEL:-llama-3.1-8b}
SLO=${SLO:-ttft:95:500}
PY=${PY:-python3}
COMMON=(--model "$MODEL" --dtype bfloat16 --engine fast --mode static --prompt-len lognormal:512:0.6
        --output-len lognormal:256:0.5 --repeats 2 --warmup 0 --seed 0 --no-calibrate)
mkdir -p "$OUT"
sweep() {  # NAME OPTIONS...: one runner process, its wall time (load included) in OUT/NAME.wall_s
  local name=$1; shift
  local start=$SECONDS
  "$PY" -m runners sweep --out "$OUT/$name" "${COMMON[@]}" "$@"
  echo $((SECONDS - start)) > "$OUT/$name.wall_s"
}
sweep refined --batch-sizes 4,8,16 --refine-points 4 --refine-slo "$SLO"
BRACKET=$("$PY" bench/refine_table.py bracket "$OUT/refined" "$SLO")
sweep dense --batch-sizes "$BRACKET"
"$PY" bench/refine_table.py table "$OUT" "$SLO"
