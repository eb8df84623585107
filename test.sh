#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: .venv, packages, Debian's chromium, then pytest.
# Chromium installs while pip does (they share nothing); pytest runs on two workers (TEST_WORKERS to
# change), each taking whole test files, so a module's fixtures are made once (docs/benchmarks.md, issue 35).
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
exec .venv/bin/python -m pytest --numprocesses "${TEST_WORKERS:-2}" --dist loadfile "$@"
