#!/usr/bin/env bash
# The test command of the README and of CI: build, a short fuzz run of the state-file reader, the PyTorch op's
# and the training program's tests (CPU), a training smoke run of every variant, then every C++ test.
# Exercised by .ci/run on a fresh clone (CPU only; GPU tests skip with a reason).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
bash scripts/fuzz.sh --seconds "${GPROJ_FUZZ_SECONDS:-30}"
bash scripts/python_test.sh
bash scripts/train_smoke.sh
ctest --preset release -j "$(nproc)"
