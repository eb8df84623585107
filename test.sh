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
# Two passes, each given the arguments; "no test selected" (pytest's 5) in one pass is no failure (a -k may
# pick only the other's tests); an interrupted, broken or mistyped first pass (2, 3, 4) ends it there.
shared=0 alone=0
.venv/bin/python -m pytest --numprocesses "${TEST_WORKERS:-2}" --dist loadfile --phase shared "$@" || shared=$?
case "$shared" in 2|3|4) exit "$shared" ;; esac
.venv/bin/python -m pytest --phase alone "$@" || alone=$?
if [ "$shared" -eq 5 ] && [ "$alone" -eq 5 ]; then exit 5; fi
[ "$shared" -eq 5 ] && shared=0
[ "$alone" -eq 5 ] && alone=0
exit $((shared > alone ? shared : alone))
