#!/usr/bin/env bash
# Start BatchScope: make .venv if needed, install the pinned packages, serve on localhost.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh requirements.txt
exec .venv/bin/python -m streamlit run app.py --server.address localhost "$@"
