#!/usr/bin/env bash
# Session 44, run 1 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at the commit
# README.md lists): the dQ post-pass v5 (h16_dq_kernel) checked (fp16-lowrank's GPU tests) and timed (the backward
# of baseline, gproj and gproj-h16 at the speed bar's shapes; ncu's per-kernel times at N = 4k), then ncu's
# per-instruction counters (SourceCounters, SASS) of the backward main kernel of gproj-h16 and of baseline at D = 128,
# N = 4k, and ncu's sections of the post-pass v5.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "run1: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
bin=.prebuilt/bin
timeout 200 "$bin/cuda_tests" --gtest_filter='Fp16LowRank*:*Fp16LowRankMatchesOracleAndCpu*:ConvertFp16*' >"$out/cuda_tests.log" 2>&1
echo "== cuda_tests: rc=$?; $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \]" "$out/cuda_tests.log" | head
for shape in 128:4096:0 128:4096:1 128:8192:0 128:8192:1 128:16384:0 128:16384:1; do
  for label in baseline gproj gproj-h16; do
    timeout 60 "$bin/cuda_attention_bench" --only "$label" --shape "$shape" --reps 10 | grep -vE '^(variant|#)'
  done
done | tee "$out/bench.txt"
for label in gproj-h16 baseline; do
  timeout 120 ncu --metrics gpu__time_duration.sum --csv --print-units base "$bin/cuda_attention_bench" --only "$label" \
    --shape 128:4096:0 --reps 1 >"$out/times_$label.csv" 2>/dev/null
  echo "== ncu times $label: rc=$?"
  python3 bench/ncu_times.py "$out/times_$label.csv"
done
timeout 120 ncu -k regex:h16_dq_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section WarpStateStats "$bin/cuda_attention_bench" --only gproj-h16 --shape 128:4096:0 \
  --reps 1 >"$out/ncu_h16_dq_kernel.txt" 2>&1
echo "== ncu h16_dq_kernel: rc=$?"
grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" "$out/ncu_h16_dq_kernel.txt"
for label in gproj-h16 baseline; do
  timeout 150 ncu -k regex:flash_bwd_wg_kernel --launch-skip 1 --launch-count 1 --section SourceCounters \
    --section WarpStateStats --import-source no -o "$out/src_$label" "$bin/cuda_attention_bench" --only "$label" \
    --shape 128:4096:0 --reps 1 >"$out/src_$label.log" 2>&1
  echo "== ncu source $label: rc=$?"
  timeout 60 ncu -i "$out/src_$label.ncu-rep" --page source --csv --print-source sass >"$out/src_$label.csv" 2>&1
  echo "== ncu source page $label: rc=$? $(wc -l <"$out/src_$label.csv") lines"
  head -c 600 "$out/src_$label.csv"; echo
done
