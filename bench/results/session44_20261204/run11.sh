#!/usr/bin/env bash
# Session 44, run 11 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at the commit
# README.md lists): fp16-lowrank's C++ GPU tests at the final commit (its forward now zeroes its statistics' small
# regions first).
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "run11: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
timeout 200 .prebuilt/bin/cuda_tests --gtest_filter='Fp16LowRank*:*Fp16LowRankMatchesOracleAndCpu*:ConvertFp16*' >"$out/cuda_tests.log" 2>&1
echo "== cuda_tests: rc=$?; $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | tr '\n' ' ')"
