#!/usr/bin/env bash
# Session 44, run 13 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at the commit
# README.md lists): after the clean-up (one row-norm helper for the conversion pass and fp16-lowrank's max |dO_i|;
# one CUDA forward path in the torch binding), the fp16-lowrank C++ GPU tests (the conversion bit for bit, both
# forms) and the whole tests/python/test_attention.py.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "run13: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
install_prebuilt_extension
timeout 200 .prebuilt/bin/cuda_tests --gtest_filter='Fp16LowRank*:*Fp16LowRankMatchesOracleAndCpu*:ConvertFp16*' >"$out/cuda_tests.log" 2>&1
echo "== cuda_tests: rc=$?; $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | tr '\n' ' ')"
PYTHONPATH=python timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_attention.py >"$out/pytest.log" 2>&1
echo "== pytest: rc=$?"
grep -E "passed|failed|FAILED" "$out/pytest.log" | tail -5
