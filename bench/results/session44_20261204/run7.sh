#!/usr/bin/env bash
# Session 44, run 7 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at the commit
# README.md lists): gproj-h16d with its first preprocess pass token-major (h16_dout_max_kernel):
# the fp16-lowrank GPU tests, the backward of baseline, gproj-h16 and gproj-h16d (two rounds), ncu's per-kernel
# times of gproj-h16d at N = 4k.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "run7: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
bin=.prebuilt/bin
timeout 200 "$bin/cuda_tests" --gtest_filter='Fp16LowRank*:*Fp16LowRankMatchesOracleAndCpu*:ConvertFp16*' >"$out/cuda_tests.log" 2>&1
echo "== cuda_tests: rc=$?; $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \]" "$out/cuda_tests.log" | head
for round in 1 2; do
  for shape in 128:4096:0 128:4096:1 128:8192:0 128:8192:1 128:16384:0 128:16384:1; do
    for label in baseline gproj-h16 gproj-h16d; do
      timeout 60 "$bin/cuda_attention_bench" --only "$label" --shape "$shape" --reps 10 | grep -vE '^(variant|#)' |
        sed "s/\$/  r$round/"
    done
  done
done | tee "$out/bench.txt"
timeout 120 ncu --metrics gpu__time_duration.sum --csv --print-units base "$bin/cuda_attention_bench" --only gproj-h16d \
  --shape 128:4096:0 --reps 1 >"$out/times_gproj-h16d.csv" 2>/dev/null
echo "== ncu times gproj-h16d: rc=$?"
python3 bench/ncu_times.py "$out/times_gproj-h16d.csv"
