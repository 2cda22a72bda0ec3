#!/usr/bin/env bash
# Session 51, run 2 (device tool, main 44706f9 with .prebuilt from scripts/device_prebuild.sh; carry
# [".gproj_commit", ".prebuilt"]; GPROJ_COMMIT=44706f9dc5bd): the op's forward, fwdfix against gproj, kernel by
# kernel (fwd_profile.py).
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
install_prebuilt_extension
PYTHONPATH=python timeout 200 python3 bench/results/session51_20261205/fwd_profile.py >"$out/fwd_profile.txt" 2>&1
echo "fwd_profile: rc=$?"
cat "$out/fwd_profile.txt"
