# Sourced by run.sh and test.sh: create .venv once, reinstall only when the requirements change.
# --no-compile: Python compiles (and caches) a module when it is first imported, so pip does not compile
# the thousands nothing imports (most of ray, triton and transformers); a fresh install takes ~40% less.
# That cache must be allowed: with PYTHONDONTWRITEBYTECODE set (as on the CI machine) every process, each
# runner and server a test starts, compiled torch's and transformers' sources again (importing the runner
# took 4.7-5.4 s instead of 2.6 s, collecting the tests 17 s instead of 7 s). It lives in .venv/pycache, so
# the working tree stays clean.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="$PWD/.venv/pycache"
requirements="$1"
[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=".venv/.installed-$(cat requirements*.txt | sha256sum | cut -c1-16)-$requirements"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q --no-compile -r "$requirements"
  touch "$stamp"
fi
