#!/usr/bin/env bash
# Issue 15's 2-GPU measurements: one model (bfloat16, fast engine) on the chat workload as one GPU
# (TP=1), tensor parallel over 2 GPUs (TP=2) and 2 replicas, on the default device; the standalone
# all-reduce probe for the same shapes; then markdown tables for docs/benchmarks.md.
# Each part is its own sweep, so a part that finished is kept and a cut-off session resumes.
# Usage: [MODEL=llama-3.1-8b BATCHES=pow2:1:512 REPEATS=1] bench/multi_gpu.sh [probe|tp1|tp2|rep2|all] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PART=${1:-all}
OUT=${2:-data/runs/bench-multi-gpu}
PY=${PY:-python3}  # the GPU image's interpreter (it holds the CUDA torch)
MODEL=${MODEL:-llama-3.1-8b}
BATCHES=${BATCHES:-pow2:1:512}
WORK=(--model "$MODEL" --dtype bfloat16 --engine fast --mode static --batch-sizes "$BATCHES"
      --prompt-len lognormal:512:0.6 --output-len lognormal:256:0.5 --repeats "${REPEATS:-1}" --warmup 0 --seed 0
      --no-calibrate)
mkdir -p "$OUT"
run() {
  local dir=$OUT/$1; shift
  [[ -f $dir/status.json ]] && grep -q '"done"' "$dir/status.json" && return 0
  rm -rf "$dir"
  "$PY" -m runners sweep --out "$dir" --name "multi-gpu $MODEL $(basename "$dir")" "${WORK[@]}" "$@" || true
}
LIST=$("$PY" -c "from runners.spec.options import parse_batch_sizes as p; print(','.join(map(str, p('$BATCHES'))))")
REP_LIST=$("$PY" -c "print(','.join(map(str, sorted({max(2, int(b)) for b in '$LIST'.split(',')}))))")  # a replica needs a request
if [[ $PART == probe || $PART == all ]] && [[ ! -f $OUT/allreduce.json ]]; then
  "$PY" bench/allreduce_probe.py "$MODEL" "$OUT/allreduce.json" --batches "$LIST"
fi
[[ $PART == tp2 || $PART == all ]] && run tp2 --tensor-parallel 2
[[ $PART == tp1 || $PART == all ]] && run tp1
[[ $PART == rep2 || $PART == all ]] && run rep2 --replicas 2 --batch-sizes "$REP_LIST"
"$PY" bench/multi_gpu_table.py "$OUT"
