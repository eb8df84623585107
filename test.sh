#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: .venv, packages, Debian's chromium, then pytest.
# Chromium installs while pip does (they share nothing). pytest runs twice: every test but those marked `alone`
# on TEST_WORKERS xdist workers (default 2; whole files to a worker, so a module's fixtures are made once), then
# the `alone` tests (they time a real process against a bound, or read a latency cliff) in one process with no
# neighbour. On the 2-core machine one process left a core idle most of the time (docs/benchmarks.md, issue 35).
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
phase() {  # one pytest pass; "no test selected" (5, e.g. a -k that picks only the other pass's tests) is no failure
  local code=0
  .venv/bin/python -m pytest "$@" || code=$?
  [ "$code" -eq 5 ] && code=0
  return "$code"
}
shared=0 alone=0
phase --numprocesses "${TEST_WORKERS:-2}" --dist loadfile --phase shared "$@" || shared=$?
phase --phase alone "$@" || alone=$?
exit $((shared > alone ? shared : alone))
