#!/usr/bin/env bash
# The wheel as a user gets it: build it, install it into a fresh virtual
# environment outside the source tree, and check
#   1. the top-level names it installs: propopt and propopt_case_studies only (a
#      top-level `capstone` would overwrite the Capstone disassembly engine's, and
#      `case_studies` that of tendenci-case-studies);
#   2. the README's first Python example, run from an empty directory;
#   3. python -m propopt capstone --only scan --size small, from there too.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# built from a copy of the files git tracks (or would track): a build/ folder left
# in the tree by an earlier build would otherwise put stale modules in the wheel
python - "$work/src" <<'PY'
import os, shutil, subprocess, sys
listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                        capture_output=True, check=True).stdout.decode().split("\0")
for f in filter(os.path.isfile, listed):  # not a tracked file deleted in the working tree
    os.makedirs(os.path.join(sys.argv[1], os.path.dirname(f)), exist_ok=True)
    shutil.copy2(f, os.path.join(sys.argv[1], f))
PY
python -m pip wheel -q --no-deps -w "$work/dist" "$work/src"
wheel=$(ls "$work"/dist/propopt-*.whl)
python - "$wheel" <<'PY'
import sys, zipfile
names = {p.split("/")[0] for p in zipfile.ZipFile(sys.argv[1]).namelist()}
top = sorted(n.removesuffix(".py") for n in names if not n.endswith((".dist-info", ".data")))
allowed = ["propopt", "propopt_case_studies"]
if top != allowed:
    sys.exit(f"the wheel installs top-level names {top}; expected {allowed}")
print(f"wheel top-level names: {', '.join(top)}")
PY
python -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade pip
"$work/venv/bin/python" -m pip install -q -c "$root/ci/constraints.txt" "$wheel[all]"
mkdir "$work/run"
cd "$work/run"
python - "$root/README.md" > example.py <<'PY'
import re, sys
text = open(sys.argv[1]).read()
print(re.search(r"```python\n(.*?)```", text, re.S).group(1))
PY
PROPOPT_CACHE_DIR="$work/cache" "$work/venv/bin/python" example.py
echo "README example: ok"
PROPOPT_CACHE_DIR="$work/cache" "$work/venv/bin/python" -m propopt capstone --only scan --size small \
    | tail -n 4
"$work/venv/bin/python" - <<'PY'
import propopt_case_studies.capstone, propopt
assert "site-packages" in propopt.__file__ and "site-packages" in propopt_case_studies.capstone.__file__
print("installed from the wheel:", propopt.__file__)
PY
