#!/usr/bin/env bash
# Issue 39's GPU table: `transformers serve --continuous-batching` (the transformers library's own
# OpenAI-compatible server: what a quick deployment of a checkpoint gives) measured by the endpoint engine,
# beside BatchScope's continuous engine in-process (--mode continuous --engine fast) and served (`python -m
# runners serve` + the endpoint engine). One model shape: MODEL's preset with the same seeded random weights
# on all three (transformers serve loads them as a Hugging Face cache repo that bench/word_checkpoint.py
# writes: one token a word, a two-token chat template). One workload: prompts of 256 words, 64 output
# tokens, greedy, the chat API on both servers; closed-loop concurrency LOW (1,4,16: 16 requests) then
# HIGH (64: 128 requests; HIGH=64,256 HIGH_REQUESTS=512 adds 256 clients where time allows).
# transformers serve refuses ignore_eos and min_tokens, so its outputs end where it chooses (a random model
# draws EOS once in 128,256 tokens: they run to 64); it captures CUDA graphs lazily, shape by shape, so its
# points get one warm-up repeat, while BatchScope warms every shape in setup (no warm-up repeat). One
# measured run a point (no replays or added draws). Each step runs under `timeout` with what BUDGET_S (the
# whole, default 540 s: a device call is 600 s) leaves, Ctrl-C first; BatchScope's two sides run first
# (their times are known), transformers serve last, so a slow server can only cut its own points; the table
# (bench/serve_table.py, also OUT_DIR/table.md) prints whatever finished.
# Expected on an H200 for llama-3.2-1b: about 4 minutes (an estimate, not yet run there; the CPU try-out
# below takes 4). MODEL=llama-3.1-8b writes a 16 GB checkpoint to /tmp: give it BUDGET_S=580 and expect
# transformers serve's high point to be cut.
#
# The GPU image lacks the packages of transformers[serving] (fastapi, uvicorn, openai, pydantic, starlette
# and what they need): they travel as wheels in .whl/ (git-ignored; bench/serving_wheels.txt pins them and
# says how to download them again). Prefix:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
# Usage: [MODEL=llama-3.2-1b] [OUT_DIR=data/runs/bench-tserve] [DEVICE=cuda] bench/transformers_serve.sh
# (MODEL=tiny DEVICE=cpu LOW=1,4 LOW_REQUESTS=4 HIGH=8 HIGH_REQUESTS=8 PY=.venv/bin/python tries the script
# itself on a laptop, in about 4 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-llama-3.2-1b}
OUT=${OUT_DIR:-data/runs/bench-tserve}
DEVICE=${DEVICE:-cuda}
PY=${PY:-python3}  # the GPU image's interpreter (it holds the CUDA torch)
PORT=${PORT:-8766}  # runners serve's; transformers serve takes the next one
LOW=${LOW-1,4,16} LOW_REQUESTS=${LOW_REQUESTS:-16}
HIGH=${HIGH-64} HIGH_REQUESTS=${HIGH_REQUESTS:-128}
HUB=${HUB:-/tmp/batchscope-tserve/hub}  # the Hugging Face cache transformers serve loads the checkpoint from
END=$((SECONDS + ${BUDGET_S:-540}))
TABLE_S=20  # kept back for stopping a server and printing the table
WORK=(--model "$MODEL" --dtype bfloat16 --device "$DEVICE" --prompt-len fixed:256 --output-len fixed:64 --seed 0
      --repeats 1 --replays 0 --target-interval 0 --no-calibrate --slo-metric ttft --slo-ms 1000)
ENDPOINT=(--engine endpoint --api chat --request-timeout-s 120)
TRANSFORMERS=(-c 'import sys; from transformers.cli.transformers import main; sys.exit(main())')
CB=(--continuous-batching)  # its defaults otherwise: a quick deployment
# on CPU, transformers 5.17 sizes the KV cache as a share of the host's RAM, and a container kills it for that
[[ $DEVICE != cpu ]] || CB+=(--cb-max-memory-percent 0.05)
SERVER=""
mkdir -p "$OUT"
rm -rf "$OUT"/tserve-* "$OUT"/inprocess-* "$OUT"/served-* "$OUT"/*.log "$OUT/table.md"

for_at_most() {  # CAP COMMAND...: the command under `timeout`, CAP seconds or what the budget leaves
  local cap=$((END - SECONDS - TABLE_S))
  ((cap > $1)) && cap=$1
  ((cap >= 10)) || { echo "bench: no time left for ${*:2:4}" >&2; return 124; }
  timeout -s INT -k 20 "$cap" "${@:2}"  # Ctrl-C first: a sweep then ends cancelled with its finished points
}
sweep() {  # NAME CAP OPTIONS...: one sweep into OUT/NAME; a failed or cut sweep does not stop the script
  for_at_most "$2" "$PY" -m runners sweep --out "$OUT/$1" "${WORK[@]}" "${@:3}" || echo "bench: $1 ended $?" >&2
}
sweeps() {  # PREFIX CAP_LOW CAP_HIGH OPTIONS...: the LOW and HIGH sweeps of one side
  [[ -z $LOW ]] || sweep "$1-low" "$2" --concurrency "$LOW" --num-requests "$LOW_REQUESTS" "${@:4}"
  [[ -z $HIGH ]] || sweep "$1-high" "$3" --concurrency "$HIGH" --num-requests "$HIGH_REQUESTS" "${@:4}"
}
start_server() {  # NAME PORT CAP COMMAND...: start a server (output in OUT/NAME.log) and wait until it answers chat
  "${@:4}" > "$OUT/$1.log" 2>&1 &
  SERVER=$!
  for_at_most "$3" "$PY" bench/serve_ready.py "http://127.0.0.1:$2/v1" "$SERVER" "$3"
}
stop_server() {  # SIGTERM, SIGKILL if it still runs 30 s later; the GPU memory is free once it returns
  [[ -n $SERVER ]] || return 0
  kill "$SERVER" 2>/dev/null || true
  for _ in $(seq 60); do  # until it is gone or a zombie (state Z, after the ")" that ends its name)
    [[ $(sed 's/.*) //' "/proc/$SERVER/stat" 2>/dev/null | cut -c1) =~ ^Z?$ ]] && break
    sleep 0.5
  done
  kill -KILL "$SERVER" 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true
  SERVER=""
}
finish() {
  stop_server
  "$PY" bench/serve_table.py "$OUT" | tee "$OUT/table.md"
}
trap finish EXIT

"$PY" -c 'import importlib.metadata as m, json, sys
def version(name: str) -> str:
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return "missing"
names = ("torch", "transformers", "fastapi", "uvicorn", "starlette", "pydantic", "openai", "typing_extensions")
json.dump({name: version(name) for name in names}, sys.stdout)' > "$OUT/versions.json"

# 1. BatchScope in-process (first, with the served side: their times are known, the third party's are not)
sweeps inprocess 120 90 --engine fast --mode continuous --max-num-seqs 256 --max-num-batched-tokens 8192 --warmup 0

# 2. BatchScope served: runners serve with the in-process limits (slots of exactly 256 + 64 tokens)
if start_server served "$PORT" 180 "$PY" -m runners serve --model "$MODEL" --dtype bfloat16 --seed 0 --device "$DEVICE" \
    --port "$PORT" --max-num-seqs 256 --max-model-len 320 --max-num-batched-tokens 8192; then
  sweeps served 90 60 "${ENDPOINT[@]}" --url "http://127.0.0.1:$PORT/v1" --warmup 0 \
    --server-labels "runners serve, max_num_seqs 256, max_num_batched_tokens 8192"
fi
stop_server

# 3. transformers serve on the same weights, as a cache repo, with whatever time is left
if REPO=$(for_at_most 150 "$PY" bench/word_checkpoint.py --model "$MODEL" --hub "$HUB" --device "$DEVICE"); then
  if start_server tserve $((PORT + 1)) 240 env HF_HUB_CACHE="$HUB" HF_HUB_OFFLINE=1 "$PY" "${TRANSFORMERS[@]}" serve \
      "$REPO" "${CB[@]}" --device "$DEVICE" --dtype bfloat16 --host 127.0.0.1 --port $((PORT + 1)); then
    sweeps tserve 150 120 "${ENDPOINT[@]}" --url "http://127.0.0.1:$((PORT + 1))/v1" --warmup 1 \
      --server-labels "transformers serve ${CB[*]}, $REPO"
  fi
fi
