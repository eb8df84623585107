#!/usr/bin/env bash
# The H200 tables of issue 13 (continuous batching) for one preset, bfloat16, fast engine, chat
# workload (prompt lognormal:512:0.6, output lognormal:256:0.5): a static batch-size sweep, a
# continuous concurrency sweep (closed loop: saturation), a max_num_seqs sweep at a fixed arrival
# rate and a rate sweep at a fixed max_num_seqs; then a markdown table for docs/benchmarks.md.
# Setup warms and captures every shape, so no warm-up repeat is run (the outlier-step count of each
# point shows whether anything was missed). A part already measured is kept: a cut-off device call
# resumes where it stopped.
# Usage: bench/continuous.sh MODEL PART... [OUT_DIR=...]   PART: static conc-low conc-high paged seqs rate
# (paged: issue 32's concurrency sweep to 512 clients, all in flight at once on the block pool)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?give a preset (llama-3.2-1b, llama-3.1-8b)}
shift
OUT=${OUT_DIR:-data/runs/bench-continuous}
PY=${PY:-python3}  # the GPU image's interpreter (it holds the CUDA torch)
WORK=(--prompt-len lognormal:512:0.6 --output-len lognormal:256:0.5 --dtype bfloat16 --engine fast
      --warmup 0 --seed 0)
CONT=(--mode continuous --max-num-batched-tokens 8192 --slo-metric ttft --slo-ms 1000)
declare -A RATE=([llama-3.2-1b]=40 [llama-3.1-8b]=12)  # requests/s for the max_num_seqs sweep
declare -A RATES=([llama-3.2-1b]=5,20,80 [llama-3.1-8b]=2,6,18)
run() {
  local dir=$OUT/$MODEL-$1; shift
  [[ -f $dir/status.json ]] && grep -q '"done"' "$dir/status.json" && return 0
  rm -rf "$dir"
  "$PY" -m runners sweep --out "$dir" --model "$MODEL" "${WORK[@]}" "$@" || true
}
for part in "$@"; do
  case $part in
    static) run static --mode static --batch-sizes 1,4,16,64,256 --repeats 2 ;;
    conc-low) run conc-low "${CONT[@]}" --max-num-seqs 16 --concurrency 1,4,16 --num-requests 16 --repeats 2 --no-calibrate ;;
    paged) run paged "${CONT[@]}" --max-num-seqs 512 --concurrency 64,128,256,512 --num-requests 512 --repeats 1 ;;
    conc-high) run conc-high "${CONT[@]}" --max-num-seqs 256 --concurrency 64,128,256,512 --num-requests 512 --repeats 1 ;;
    seqs) run seqs "${CONT[@]}" --max-num-seqs 8,32,128 --arrival "poisson:${RATE[$MODEL]}" --num-requests 128 \
            --repeats 1 --no-calibrate ;;
    rate) run rate "${CONT[@]}" --max-num-seqs 64 --arrival "poisson:${RATES[$MODEL]}" --num-requests 64 \
            --repeats 1 --no-calibrate ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
