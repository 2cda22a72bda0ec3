#!/usr/bin/env bash
# Session 43, runs 7, 8, 9, 11, 12 and 13 (device tool; carry [".gproj_commit", ".prebuilt"] from
# scripts/device_prebuild.sh at the commit README.md lists for each run): fp16-lowrank's GPU tests, the backward of
# baseline, gproj and gproj-h16 at the speed bar's shapes (D = 128, N = 4k, 8k, 16k, causal and not), and ncu's
# per-kernel times of gproj-h16 at N = 4k. The runs differ only in the dQ post-pass they were built with.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "h16_bench: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
bin=.prebuilt/bin
timeout 200 "$bin/cuda_tests" --gtest_filter='Fp16LowRank*:*Fp16LowRankMatchesOracleAndCpu*' >"$out/cuda_tests.log" 2>&1
echo "== cuda_tests: rc=$?; $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \]" "$out/cuda_tests.log" | head
for shape in 128:4096:0 128:4096:1 128:8192:0 128:8192:1 128:16384:0 128:16384:1; do
  for label in baseline gproj gproj-h16; do
    timeout 60 "$bin/cuda_attention_bench" --only "$label" --shape "$shape" --reps 10 | grep -vE '^(variant|#)'
  done
done | tee "$out/bench.txt"
timeout 120 ncu --metrics gpu__time_duration.sum --csv --print-units base "$bin/cuda_attention_bench" --only gproj-h16 \
  --shape 128:4096:0 --reps 1 >"$out/times_gproj-h16.csv" 2>/dev/null
echo "== ncu times gproj-h16: rc=$?"
python3 bench/ncu_times.py "$out/times_gproj-h16.csv"
