#!/usr/bin/env bash
# Installs torch and pytest in a venv (build/venv), builds the extension gproj._C in place, runs tests/python.
# Exercised by scripts/test.sh (CI); exits non-zero on any failure, "no tests ran" (pytest 5) included.
set -euo pipefail
cd "$(dirname "$0")/.."

# torch 2.11 is what the GPU machine runs (GUIDE §6); GPROJ_TORCH picks another, e.g. "torch==2.3.*".
torch_spec="${GPROJ_TORCH:-torch==2.11.*}"
venv=build/venv
start=$SECONDS

# Debian's python3 needs its headers (the extension) and venv (PEP 668 forbids pip into the system python).
bash scripts/setup.sh python3-dev python3-venv

[[ -x $venv/bin/python ]] || python3 -m venv "$venv"
# torch from PyPI brings its CUDA libraries: about 5 GB installed, plus the wheels while pip unpacks them. No
# wheel cache (it would double that); on failure, how much space there was, since pip's own message is an OSError.
if ! "$venv/bin/python" -m pip install -q --no-cache-dir --disable-pip-version-check "$torch_spec" "numpy>=1.26,<3" \
  "pytest>=8,<10" "matplotlib>=3.7" "setuptools>=70"; then
  echo "python_test: pip could not install $torch_spec and the test packages into $venv;" \
    "$(df -Ph build | awk 'NR == 2 {print $4}') free there (torch needs about 8 GB while it installs)" >&2
  exit 1
fi
installed=$SECONDS

mkdir -p build/python
if ! "$venv/bin/python" setup.py build_ext --inplace --build-temp build/python/temp --build-lib build/python/lib \
  >build/python/build.log 2>&1; then
  tail -n 60 build/python/build.log >&2
  echo "python_test: building gproj._C failed (full log: build/python/build.log)" >&2
  exit 1
fi
built=$SECONDS
torch_version=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')
echo "python_test: torch $torch_version; install $((installed - start)) s, build $((built - installed)) s" >&2

# exec: pytest's exit status is the script's (5, no test collected, fails like any other non-zero) and its
# summary line is the last thing printed.
PYTHONPATH=python exec "$venv/bin/python" -m pytest tests/python -rs -p no:cacheprovider
