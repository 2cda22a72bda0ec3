#!/usr/bin/env bash
# Session 43, run 5 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at 4e7bd08):
# v3.2-h16 with delta sigma staged and the dQ post-pass v2.1: its GPU tests, the backward's time against baseline's
# and gproj's, per-kernel times (ncu), and ncu's warp-state and instruction statistics of both main kernels.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "run5: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
bin=.prebuilt/bin
timeout 200 "$bin/cuda_tests" --gtest_filter='Fp16LowRank*:*Fp16LowRankMatchesOracleAndCpu*' >"$out/cuda_tests.log" 2>&1
echo "== cuda_tests (fp16): rc=$?; $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | tr '\n' ' ')"
for shape in 128:4096:0 128:4096:1 128:8192:0 128:8192:1; do
  for label in baseline gproj gproj-h16; do
    timeout 60 "$bin/cuda_attention_bench" --only "$label" --shape "$shape" --reps 10 | grep -vE '^(variant|#)'
  done
done | tee "$out/bench.txt"
timeout 120 ncu --metrics gpu__time_duration.sum --csv --print-units base "$bin/cuda_attention_bench" --only gproj-h16 \
  --shape 128:4096:0 --reps 1 >"$out/times_gproj-h16.csv" 2>/dev/null
echo "== ncu times gproj-h16: rc=$?"
python3 bench/ncu_times.py "$out/times_gproj-h16.csv"
for label in baseline gproj-h16; do
  timeout 150 ncu -k regex:flash_bwd_wg_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section InstructionStats --section LaunchStats \
    "$bin/cuda_attention_bench" --only "$label" --shape 128:4096:0 --reps 1 >"$out/ncu_bwd_$label.txt" 2>&1
  echo "== ncu main kernel $label: rc=$?"
  grep -E "Duration|Executed Instructions |Issued Instructions |Registers Per|Stall|Warp Cycles Per Issued|Issue Slot|No Eligible" \
    "$out/ncu_bwd_$label.txt" | head -24
done
