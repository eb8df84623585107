#!/usr/bin/env bash
# The 2-GPU measurements of issue 10's bar: Llama-3.1-8B (bfloat16, fast engine), chat workload,
# batches 1…512, as one GPU (TP=1), tensor parallel over 2 GPUs (TP=2) and 2 replicas; then a
# markdown table per run (all-reduce share per batch, where the knee falls) for docs/benchmarks.md.
# Each part is its own sweep, so a part that finished is kept and a cut-off session resumes.
# Usage: bench/multi_gpu.sh [tp1|tp2|rep2|all] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PART=${1:-all}
OUT=${2:-data/runs/bench-multi-gpu}
PY=${PY:-python3}  # the GPU image's interpreter (it holds the CUDA torch)
WORK=(--model llama-3.1-8b --dtype bfloat16 --engine fast --mode static --batch-sizes pow2:1:512
      --prompt-len lognormal:512:0.6 --output-len lognormal:256:0.5 --repeats 2 --warmup 1 --seed 0
      --device cuda:0 --no-calibrate)
run() {
  local dir=$OUT/$1; shift
  [[ -f $dir/status.json ]] && grep -q '"done"' "$dir/status.json" && return 0
  rm -rf "$dir"
  "$PY" -m runners sweep --out "$dir" --name "multi-gpu $(basename "$dir")" "${WORK[@]}" "$@"
}
[[ $PART == tp1 || $PART == all ]] && run tp1
[[ $PART == tp2 || $PART == all ]] && run tp2 --tensor-parallel 2
[[ $PART == rep2 || $PART == all ]] && run rep2 --replicas 2
"$PY" bench/multi_gpu_table.py "$OUT"
