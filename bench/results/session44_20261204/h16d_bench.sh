#!/usr/bin/env bash
# Session 44, runs 5, 6 and 7 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at
# the commit README.md lists for each run): fp16-lowrank with 1 / l on dO's side (FlashParams::fp16_dout_side, bench
# label gproj-h16d) beside gproj-h16 and baseline: the fp16-lowrank GPU tests (both forms against the oracle and
# their emulators), the backward at the speed bar's shapes (two rounds), and ncu's per-kernel times of gproj-h16d at
# N = 4k. CHECK=1 (run 5) also runs `gproj check --fp16-dout-side` on the stress suite; SOURCE=1 (run 6) also takes
# ncu's SASS counters (SourceCounters) of its main kernel.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "h16d_bench: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
bin=.prebuilt/bin
timeout 200 "$bin/cuda_tests" --gtest_filter='Fp16LowRank*:*Fp16LowRankMatchesOracleAndCpu*:ConvertFp16*' >"$out/cuda_tests.log" 2>&1
echo "== cuda_tests: rc=$?; $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \]|Failure|Expected|Which is|actual" "$out/cuda_tests.log" | head -20
if [ "${CHECK:-0}" = 1 ]; then
  timeout 120 "$bin/gproj" check --suite stress --device cuda --variants gproj --projection fp16-lowrank \
    --fp16-dout-side --json "$out/check.json" >"$out/check.txt" 2>&1
  echo "== gproj check --fp16-dout-side: rc=$?"
  head -20 "$out/check.txt"
fi
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
if [ "${SOURCE:-0}" = 1 ]; then
  timeout 150 ncu -k regex:flash_bwd_wg_kernel --launch-skip 1 --launch-count 1 --section SourceCounters \
    --section WarpStateStats --import-source no -o "$out/src_h16d" "$bin/cuda_attention_bench" --only gproj-h16d \
    --shape 128:4096:0 --reps 1 >"$out/src_h16d.log" 2>&1
  echo "== ncu source: rc=$?"
  timeout 60 ncu -i "$out/src_h16d.ncu-rep" --page source --csv --print-source sass >"$out/src_gproj-h16d.csv" 2>&1
  rm -f "$out/src_h16d.ncu-rep"
fi
