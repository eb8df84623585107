#!/usr/bin/env bash
# Make the shipped demo runs on a GPU host: real sweeps of the chat workload (issue 7).
# Usage: bench/demo_sweeps.sh OUT_DIR
# Each sweep is bounded by `timeout`; a sweep cut short keeps its finished points (state interrupted).
set -u
out="$1"
mkdir -p "$out"
chat=(--prompt-len lognormal:512:0.6 --output-len lognormal:256:0.5 --repeats 2 --warmup 1 --seed 0)
sweep() {  # name, seconds allowed, then runner options
  local name="$1" limit="$2"; shift 2
  timeout --signal=TERM --kill-after=20 "$limit" \
    python3 -m runners sweep --out "$out/$name" --name "$name" "$@" 2>&1 | grep -v '^\[' | tail -2
}
sweep h200-fast-8b-bf16-chat 230 --model llama-3.1-8b --dtype bfloat16 --engine fast --batch-sizes pow2:1:1024 "${chat[@]}"
sweep h200-fast-1b-bf16-chat 190 --model llama-3.2-1b --dtype bfloat16 --engine fast --batch-sizes pow2:1:1024 "${chat[@]}"
sweep h200-hf-1b-bf16-chat 110 --model llama-3.2-1b --dtype bfloat16 --engine hf-generate --batch-sizes pow2:1:64 "${chat[@]}"
