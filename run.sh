#!/usr/bin/env bash
# Start BatchScope: make .venv if needed, install the pinned packages, serve on localhost.
# Served beyond localhost (--server.address 0.0.0.0) it needs a sign-in provider (docs/team.md), or
# --trusted-network to serve without sign-in on a network you trust (the app then says so in a banner).
set -euo pipefail
cd "$(dirname "$0")"
args=()
export BATCHSCOPE_TRUSTED_NETWORK=0
for arg in "$@"; do
  if [ "$arg" = "--trusted-network" ]; then BATCHSCOPE_TRUSTED_NETWORK=1; else args+=("$arg"); fi
done
# Checked before anything is installed: the standard library is enough to refuse an unsafe start.
python3 -m batchscope.team.serving ${args[@]+"${args[@]}"}
source scripts/venv.sh requirements.txt
exec .venv/bin/python -m streamlit run serve.py --server.address localhost ${args[@]+"${args[@]}"}
