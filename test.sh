#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: .venv, packages, Debian's chromium, then pytest.
# Chromium installs while pip does (they share nothing). pytest runs in one process: on the 2-core CI machine
# two xdist workers took as long (28 min 49 s against 29 min 8 s) and starved the tests that time a real
# runner (docs/benchmarks.md, issue 35); TEST_WORKERS=N spreads whole test files over N workers elsewhere.
set -euo pipefail
cd "$(dirname "$0")"
chromium_log=""
if ! command -v chromium >/dev/null 2>&1; then
  chromium_log="$(mktemp)"
  (apt-get update -q && apt-get install -y -q chromium) >"$chromium_log" 2>&1 &
  chromium_pid=$!
fi
source scripts/venv.sh requirements-dev.txt
if [ -n "$chromium_log" ]; then
  wait "$chromium_pid" || { cat "$chromium_log" >&2; exit 1; }
  rm -f "$chromium_log"
fi
exec .venv/bin/python -m pytest --numprocesses "${TEST_WORKERS:-0}" --dist loadfile "$@"
