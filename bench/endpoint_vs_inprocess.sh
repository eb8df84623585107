#!/usr/bin/env bash
# Issue 20's GPU bar: the same workload measured in-process (continuous mode, fast engine) and through
# `python -m runners serve` with the endpoint engine, one model, closed-loop concurrency 1…256; then a
# table of output tok/s side by side (the bar: within 10 %) with TTFT/ITL and the HTTP overhead the
# server's own engine times show. Fixed lengths (prompt 256, output 64) keep it short: two sweeps a side
# (few requests at low concurrency, many at high), max_num_seqs 256 and slots of exactly 320 tokens on
# both sides, no warm-up repeat (setup warms and captures every shape; the outlier-step count shows a
# miss). About 5 minutes on an H200 for llama-3.1-8b (random weights).
# Usage: bench/endpoint_vs_inprocess.sh [MODEL=llama-3.1-8b] [OUT_DIR=...] [DEVICE=cuda] (DEVICE=cpu with
# MODEL=tiny tries the script itself on a laptop)
# Needs on the host: python3 with torch (CUDA), transformers, pyarrow, nvidia-ml-py, aiohttp.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-llama-3.1-8b}
OUT=${OUT_DIR:-data/runs/bench-endpoint}
PY=${PY:-python3}
PORT=${PORT:-8765}
DEVICE=${DEVICE:-cuda}
WORK=(--model "$MODEL" --dtype bfloat16 --device "$DEVICE" --prompt-len fixed:256 --output-len fixed:64 --seed 0 --warmup 0
      --repeats 1 --no-calibrate --slo-metric ttft --slo-ms 1000)
LOW=(--concurrency 1,4,16 --num-requests 24)
HIGH=(--concurrency 64,256 --num-requests 512)
mkdir -p "$OUT"
rm -rf "$OUT"/inprocess-* "$OUT"/served-* "$OUT/timings.jsonl"

inprocess() {
  "$PY" -m runners sweep --out "$OUT/inprocess-$1" "${WORK[@]}" --engine fast --mode continuous \
    --max-num-seqs 256 --max-num-batched-tokens 8192 "${@:2}" || true
}
inprocess low "${LOW[@]}"
inprocess high "${HIGH[@]}"

"$PY" -m runners serve --model "$MODEL" --dtype bfloat16 --seed 0 --device "$DEVICE" --port "$PORT" \
  --max-num-seqs 256 --max-model-len 320 --max-num-batched-tokens 8192 --timings "$OUT/timings.jsonl" \
  2> "$OUT/server.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
"$PY" - "$PORT" "$SERVER" <<'EOF'
import os, sys, time, urllib.request
port, pid = sys.argv[1], int(sys.argv[2])
for _ in range(600):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
        sys.exit(0)
    except OSError:
        with open(f"/proc/{pid}/stat") as f:  # gone or a zombie: the server died, stop waiting
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                sys.exit("runners serve exited: see server.log")
        time.sleep(0.5)
sys.exit("runners serve did not answer in 5 minutes")
EOF
served() {
  "$PY" -m runners sweep --out "$OUT/served-$1" "${WORK[@]}" --engine endpoint \
    --url "http://127.0.0.1:$PORT/v1" "${@:2}" || true
}
served low "${LOW[@]}"
served high "${HIGH[@]}"
kill "$SERVER"
wait "$SERVER" 2>/dev/null || true
"$PY" bench/endpoint_table.py "$OUT"
