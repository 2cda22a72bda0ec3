#!/usr/bin/env bash
# The test command of the README and of CI: build, a short fuzz run of the state-file reader, then every test.
# Exercised by .ci/run on a fresh clone (CPU only; the GPU tests of later issues skip with a reason there).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
bash scripts/fuzz.sh --seconds "${GPROJ_FUZZ_SECONDS:-30}"
ctest --preset release -j "$(nproc)"
