#!/usr/bin/env bash
# Session 43, run 2 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at 47448da):
# the conversion pass v2 and fp16-lowrank's forward tests, the forward's time against gproj-fs and baseline, and
# per-kernel times (ncu) of both forwards at D = 128, N = 4k.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "run2: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
bin=.prebuilt/bin
timeout 120 "$bin/cuda_tests" --gtest_filter='ConvertFp16*:Fp16LowRank*' >"$out/cuda_tests.log" 2>&1
echo "== cuda_tests (fp16): rc=$?"
grep -E "evidence|OK|FAILED|Failure" "$out/cuda_tests.log" | head -30
run_sanitizers "$out" "$bin/cuda_tests" 'ConvertFp16*:Fp16LowRankForward.HeadsFarApartInScale' memcheck racecheck
for shape in 128:4096:0 128:4096:1 128:8192:0 128:8192:1; do
  for label in baseline gproj-fs gproj-h16; do
    timeout 60 "$bin/cuda_attention_bench" --only "$label" --shape "$shape" --reps 10 | grep -vE '^(variant|#)'
  done
done | tee "$out/bench.txt"
for label in gproj-fs gproj-h16; do
  timeout 120 ncu --metrics gpu__time_duration.sum --csv --print-units base "$bin/cuda_attention_bench" --only "$label" \
    --shape 128:4096:0 --reps 1 >"$out/times_$label.csv" 2>"$out/times_$label.err"
  echo "== ncu times $label: rc=$?"
  python3 bench/ncu_times.py "$out/times_$label.csv"
done
