#!/usr/bin/env bash
# Session 26 run 6, on the prebuilt 9dac649 (the review's mend of the workspace test): every
# GPU test, then memcheck on the small cases (the workspace test among them).
#   (run from .ab_s26r3/ in the repository root)
set -u
cd "$(dirname "$0")/.."
out="$OUT"; mkdir -p "$out"
note() { echo "== $1"; }
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" | tee "$out/env.txt"
timeout 150 .prebuilt/bin/cuda_tests >"$out/cuda_tests.log" 2>&1
echo "cuda_tests: rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests.log")"
grep -E "DirectDkDv|WorkspaceSized" "$out/cuda_tests.log"
run_sanitizers "$out" .prebuilt/bin/cuda_tests "$small_cases" memcheck
