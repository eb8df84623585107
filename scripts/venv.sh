# Sourced by run.sh and test.sh: create .venv once, reinstall only when the requirements change.
# --no-compile: Python compiles (and caches) a module when it is first imported, so pip does not compile
# the thousands nothing imports (most of ray, triton and transformers); a fresh install takes ~40% less.
requirements="$1"
[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=".venv/.installed-$(cat requirements*.txt | sha256sum | cut -c1-16)-$requirements"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q --no-compile -r "$requirements"
  touch "$stamp"
fi
