# Sourced by run.sh and test.sh: create .venv once, reinstall only when the requirements change.
requirements="$1"
[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=".venv/.installed-$(cat requirements*.txt | sha256sum | cut -c1-16)-$requirements"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r "$requirements"
  touch "$stamp"
fi
