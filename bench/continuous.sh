#!/usr/bin/env bash
# The H200 measurements of issue 8's bar: for a preset (bfloat16, fast engine) a static batch-size
# sweep, a continuous max_num_seqs sweep at a fixed arrival rate, and a continuous rate sweep at a
# fixed max_num_seqs, all on the same workload; then a markdown table for docs/benchmarks.md.
# Each part fits a 10-minute device command on an H200; `all` runs both models and every part.
# Usage: bench/continuous.sh MODEL|all [static|seqs|rate|all] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?give a preset (llama-3.2-1b, llama-3.1-8b) or all}
PART=${2:-all}
OUT=${3:-data/runs/bench-continuous}
PY=${PY:-python3}  # the GPU image's interpreter (it holds the CUDA torch)
WORK=(--prompt-len lognormal:512:0.6 --output-len lognormal:256:0.5 --dtype bfloat16 --engine fast
      --repeats 2 --warmup 1 --seed 0 --no-calibrate)
CONT=(--mode continuous --num-requests 200 --max-num-batched-tokens 8192 --slo-metric ttft --slo-ms 1000)
declare -A RATE=([llama-3.2-1b]=40 [llama-3.1-8b]=12)  # requests/s for the max_num_seqs sweep
declare -A RATES=([llama-3.2-1b]=5,10,20,40,80 [llama-3.1-8b]=2,4,8,12,16,24)
if [[ $MODEL == all ]]; then
  for m in llama-3.2-1b llama-3.1-8b; do "$0" "$m" all "$OUT"; done
  exit 0
fi
run() {  # a part already measured is kept, so a cut-off session resumes where it stopped
  local dir=$OUT/$MODEL-$1; shift
  [[ -f $dir/status.json ]] && grep -q '"done"' "$dir/status.json" && return 0
  rm -rf "$dir"
  "$PY" -m runners sweep --out "$dir" --model "$MODEL" "${WORK[@]}" "$@"
}
[[ $PART == static || $PART == all ]] && run static --mode static --batch-sizes pow2:1:256
[[ $PART == seqs || $PART == all ]] && run seqs "${CONT[@]}" --max-num-seqs pow2:8:256 --arrival "poisson:${RATE[$MODEL]}"
[[ $PART == rate || $PART == all ]] && run rate "${CONT[@]}" --max-num-seqs 64 --arrival "poisson:${RATES[$MODEL]}"
"$PY" bench/continuous_table.py "$OUT"
