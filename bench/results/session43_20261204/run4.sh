#!/usr/bin/env bash
# Session 43, run 4 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at b16aefe):
# fp16-lowrank with the dQ post-pass v2: its GPU tests, `gproj check` on the D = 128 stress cases, the backward's time
# against baseline's and gproj's, per-kernel times (ncu) of baseline and gproj-h16.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "run4: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
bin=.prebuilt/bin
timeout 200 "$bin/cuda_tests" --gtest_filter='ConvertFp16*:Fp16LowRank*:*Fp16LowRankMatchesOracleAndCpu*' \
  >"$out/cuda_tests.log" 2>&1
echo "== cuda_tests (fp16): rc=$?"
grep -E "evidence|OK \]|FAILED|Failure|Expected|Which is|actual|vs CPU" "$out/cuda_tests.log" | head -60
run_sanitizers "$out" "$bin/cuda_tests" 'Awkward/CudaSweep.Fp16LowRankMatchesOracleAndCpu/q64_k200_h4x2_d128*' \
  memcheck racecheck
timeout 120 "$bin/gproj" check --suite stress --cases random-d128 sharp-rows-d128 shared-keys-causal-gqa --device all \
  --variants fp32,baseline,gproj --projection fp16-lowrank --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check.txt" 2>&1
echo "== gproj check --projection fp16-lowrank --device all: rc=$?"
grep -E "cuda|error|Error" "$out/check.txt" | head -60
for shape in 128:4096:0 128:4096:1 128:8192:0; do
  for label in baseline gproj gproj-h16; do
    timeout 60 "$bin/cuda_attention_bench" --only "$label" --shape "$shape" --reps 10 | grep -vE '^(variant|#)'
  done
done | tee "$out/bench.txt"
for label in baseline gproj-h16; do
  timeout 120 ncu --metrics gpu__time_duration.sum --csv --print-units base "$bin/cuda_attention_bench" --only "$label" \
    --shape 128:4096:0 --reps 1 >"$out/times_$label.csv" 2>"$out/times_$label.err"
  echo "== ncu times $label: rc=$?"
  python3 bench/ncu_times.py "$out/times_$label.csv"
done
