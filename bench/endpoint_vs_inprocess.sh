#!/usr/bin/env bash
# Issues 20 and 36's GPU bar: the same workloads measured in-process (continuous mode, fast engine) and
# through `python -m runners serve` with the endpoint engine, one model, closed-loop concurrency 1, 16, 64
# and 256; then a table per workload (bench/endpoint_table.py): output tok/s side by side (the bar: served
# ≥ 90 % of in-process), TTFT and ITL P50 of both, and the served TTFT's P50 part by part (client dispatch,
# uplink, parse, step wait, queue, prefill, flush, downlink; docs/run-folder.md) with the clock's error.
# Workloads: fixed (prompt 256, output 64) and chat (prompt lognormal:512:0.6, output lognormal:256:0.5).
# Each point runs its requests REPEATS times (--target-interval 0 --replays 0: a table of P50s, not a tuned
# point), no warm-up run (setup warms and captures every shape); 16 requests at concurrency 1 and 16 (at least
# as many as clients, or the point would run fewer: the spec refuses that), many at 64 and 256, max_num_seqs 256 and 8192 batched tokens on both sides, the server's slots as long
# as the longest drawn request. Duration for llama-3.1-8b (random weights) on one H200, measured
# 2026-12-03 with one repeat and no think time: about 7 minutes (each runner process ≈ 16 s of start and imports
# before its sweep, the four in-process sweeps 3.5 min, the server's start 50 s, the served sweeps ≈ 1.5 min). With
# the defaults (3 repeats, 5 ms think time; 2026-12-04) the whole set ran past 9 minutes: give each workload its own
# call (WORKLOADS=fixed, then WORKLOADS=chat; fixed 64/256 on both sides alone took 149 s, the served chat 243 s). Needs on the host: python3 with torch (CUDA), transformers, pyarrow, nvidia-ml-py, aiohttp
# (no duckdb or streamlit).
# Usage: bench/endpoint_vs_inprocess.sh [MODEL=llama-3.1-8b]   env: OUT_DIR, DEVICE (cuda), WORKLOADS
# ("fixed chat"), LOAD_SETS ("low high"), SIDES ("inprocess served"), THINK_MS (5), REPEATS (3), PORT, PY.
# REPEATS runs each point's requests that many times on both sides: the table then gives each point's TTFT P50
# per repeat (lowest–highest), the spread a one-run P50 hides (one run per point is the 2026-12-03 method).
# THINK_MS gives the clients of both sides the same think time (--think-ms): with none, each in-process client's
# next request arrives at the end of the step that finished its last and never waits for a step in flight,
# where a network client's turnaround (the served table's flush + downlink + client + uplink + parse) lands it
# inside the next step. With a few ms both sides' requests arrive off the step boundary, so the two differ only
# by the server and the network (docs/design.md §2).
# DEVICE=cpu WORKLOADS=fixed with MODEL=tiny tries the script on a laptop (the
# chat workload's longest requests are over tiny's 2048-token context).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-llama-3.1-8b}
OUT=${OUT_DIR:-data/runs/bench-endpoint}
PY=${PY:-python3}
PORT=${PORT:-8765}
DEVICE=${DEVICE:-cuda}
WORKLOADS=${WORKLOADS:-fixed chat}
LOAD_SETS=${LOAD_SETS:-low high}
SIDES=${SIDES:-inprocess served}
THINK_MS=${THINK_MS:-5}
REPEATS=${REPEATS:-3}
COMMON=(--model "$MODEL" --dtype bfloat16 --device "$DEVICE" --seed 0 --warmup 0 --repeats "$REPEATS" --replays 0
        --target-interval 0 --no-calibrate --slo-metric ttft --slo-ms 1000)
declare -A LENGTHS=([fixed]="--prompt-len fixed:256 --output-len fixed:64"
                    [chat]="--prompt-len lognormal:512:0.6 --output-len lognormal:256:0.5")
declare -A REQUESTS=([fixed-low]=16 [fixed-high]=512 [chat-low]=16 [chat-high]=256)  # ≥ the most clients
declare -A LOADS=([low]=1,16 [high]=64,256)
mkdir -p "$OUT"
rm -rf "$OUT"/inprocess-* "$OUT"/served-*

longest() {  # the most KV tokens a request of the sweeps holds: the server's slot length
  local sweeps=()
  for workload in $WORKLOADS; do
    for load in low high; do sweeps+=("${LENGTHS[$workload]} ${REQUESTS[$workload-$load]}"); done
  done
  "$PY" - "$MODEL" "${sweeps[@]}" <<'EOF'
import sys
sys.path.insert(0, ".")
from runners.spec import validate
longest = 0
for sweep in sys.argv[2:]:
    _, prompt, _, output, n = sweep.split()
    spec = validate({"model": sys.argv[1], "engine": "fast", "mode": "continuous", "concurrency": "1", "seed": 0,
                     "prompt_len": prompt, "output_len": output, "num_requests": int(n), "warmup": 0})
    longest = max(longest, spec.longest_request(spec.num_requests))
print(longest)
EOF
}
MAX_MODEL_LEN=$(longest)

for workload in $WORKLOADS; do
  for load in $LOAD_SETS; do
    [[ " $SIDES " == *" inprocess "* ]] || continue
    # shellcheck disable=SC2086  # LENGTHS holds several options
    "$PY" -m runners sweep --out "$OUT/inprocess-$workload-$load" "${COMMON[@]}" ${LENGTHS[$workload]} \
      --engine fast --mode continuous --max-num-seqs 256 --max-num-batched-tokens 8192 \
      --concurrency "${LOADS[$load]}" --num-requests "${REQUESTS[$workload-$load]}" --think-ms "$THINK_MS" || true
  done
done
if [[ " $SIDES " != *" served "* ]]; then
  "$PY" bench/endpoint_table.py "$OUT"
  exit 0
fi

"$PY" -m runners serve --model "$MODEL" --dtype bfloat16 --seed 0 --device "$DEVICE" --port "$PORT" \
  --max-num-seqs 256 --max-model-len "$MAX_MODEL_LEN" --max-num-batched-tokens 8192 2> "$OUT/server.log" &
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
for workload in $WORKLOADS; do
  for load in $LOAD_SETS; do
    # shellcheck disable=SC2086
    "$PY" -m runners sweep --out "$OUT/served-$workload-$load" "${COMMON[@]}" ${LENGTHS[$workload]} \
      --engine endpoint --url "http://127.0.0.1:$PORT/v1" \
      --concurrency "${LOADS[$load]}" --num-requests "${REQUESTS[$workload-$load]}" --think-ms "$THINK_MS" || true
  done
done
kill "$SERVER"
wait "$SERVER" 2>/dev/null || true
"$PY" bench/endpoint_table.py "$OUT"
