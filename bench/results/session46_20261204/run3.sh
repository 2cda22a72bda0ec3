#!/usr/bin/env bash
# Session 46, run 3 (device tool; carry [".pb_s46-d64", ".pb_s46-d64b"]): run 2's synccheck finding. First synccheck
# on baseline's sweep case q200_k64 (D = 64, Nk = 64: the second warpgroup has no keys) with run 2's build, to see
# whether the v3.1 / v3.17 skip path fails it for every variant; then at 9cf9725 (the skip path waits for the stage
# to land before releasing it) the whole C++ GPU suite and memcheck, racecheck and synccheck on the small cases
# (device_env.sh's, which now take q200_k64).
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
old=$(mktemp -d) new=$(mktemp -d)
tar xJf .pb_s46-d64/pack.tar.xz -C "$old" && tar xJf .pb_s46-d64b/pack.tar.xz -C "$new" || exit 2
mkdir -p "$out/old" "$out/new"
run_sanitizers "$out/old" "$old/bin/cuda_tests" 'Awkward/CudaSweep.EveryVariantMatchesOracleAndCpu/q200_k64_*' synccheck
t0=$SECONDS
timeout 150 "$new/bin/cuda_tests" >"$out/new/cuda_tests.log" 2>&1
echo "== cuda_tests ($(cat .pb_s46-d64b/COMMIT)): rc=$? ($((SECONDS - t0)) s); $(python3 scripts/gtest_triage.py "$out/new/cuda_tests.log")"
run_sanitizers "$out/new" "$new/bin/cuda_tests" "$small_cases" synccheck memcheck racecheck
rm -rf "$old" "$new"
