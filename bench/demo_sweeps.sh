#!/usr/bin/env bash
# Make the shipped demo runs on a GPU host (issue 7): fast × {1B, 8B} × {bf16, fp16} × {chat, long},
# plus hf-generate on the 1B chat workload for contrast; 3 repeats each, batches 1…1024 or to the OOM.
# Usage: bench/demo_sweeps.sh OUT_DIR [NAME ...]   (no NAME: every sweep); bench/demo_sweeps.sh list
# The full set needs more than one device call (each call is capped at 600 s), so pick names per call.
# Each sweep is bounded by `timeout`; a sweep cut short keeps its finished points (state interrupted).
set -u
usage="usage: $0 OUT_DIR [NAME ...]  |  $0 list"
chat=(--prompt-len lognormal:512:0.6 --output-len lognormal:256:0.5)
long=(--prompt-len lognormal:8192:0.3 --output-len fixed:256)
common=(--repeats 3 --seed 0 --batch-sizes pow2:1:1024)
declare -A limit=(
  [fast-1b-bf16-chat]=200 [fast-1b-fp16-chat]=200 [fast-8b-bf16-chat]=280 [fast-8b-fp16-chat]=280
  [fast-1b-bf16-long]=240 [fast-1b-fp16-long]=240 [fast-8b-bf16-long]=280 [fast-8b-fp16-long]=280
  [hf-1b-bf16-chat]=240
)
options() {  # name -> runner options
  local name="$1" engine model dtype workload
  IFS=- read -r engine model dtype workload <<<"$name"
  case "$model" in 1b) model=llama-3.2-1b ;; 8b) model=llama-3.1-8b ;; esac
  case "$dtype" in bf16) dtype=bfloat16 ;; fp16) dtype=float16 ;; esac
  local -n shape="$workload"
  local warmup=0  # the fast engine's setup warms up; generate() has no setup, so it gets a warm-up repeat
  [ "$engine" = hf ] && engine=hf-generate && warmup=1
  echo --model "$model" --dtype "$dtype" --engine "$engine" "${shape[@]}" "${common[@]}" --warmup "$warmup"
}
if [ "${1:-}" = list ]; then printf '%s\n' "${!limit[@]}" | sort; exit 0; fi
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
out="$1"; shift
names=("$@")
[ ${#names[@]} -eq 0 ] && mapfile -t names < <(printf '%s\n' "${!limit[@]}" | sort)
for name in "${names[@]}"; do  # every name checked before anything runs
  [ -n "${limit[$name]:-}" ] || { echo "unknown sweep $name (see: $0 list)" >&2; exit 2; }
done
mkdir -p "$out"
for name in "${names[@]}"; do
  # shellcheck disable=SC2046  # options() prints words meant to be split
  timeout --signal=TERM --kill-after=20 "${limit[$name]}" \
    python3 -m runners sweep --out "$out/h200-$name" --name "h200-$name" $(options "$name") 2>&1 \
    | grep -v '^\[' | tail -2
done
