#!/usr/bin/env bash
# Installs the Debian dependencies (idempotent), configures the release preset and builds everything.
# Exercised by the README's commands and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
