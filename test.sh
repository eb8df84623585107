#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: .venv, packages, Debian's chromium, then pytest.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh requirements-dev.txt
if ! command -v chromium >/dev/null 2>&1; then
  (apt-get update -q && apt-get install -y -q chromium) >/dev/null
fi
exec .venv/bin/python -m pytest "$@"
