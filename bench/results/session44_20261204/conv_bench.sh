#!/usr/bin/env bash
# Session 44, runs 3 and 4 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at the
# commit README.md lists for each run): a conversion pass (run 3: v3, token-major absmax and copies; run 4: v3.1, the
# transposed copy in registers) checked (its GPU test bit for bit against the CPU, fp16-lowrank's forward and
# backward tests) and timed: cuda_attention_bench's forward and backward of baseline, gproj and gproj-h16 at the
# speed bar's shapes, ncu's per-kernel times of gproj-h16 at NCU_SHAPES (run 3: "128:4096:0 128:4096:1"; run 4, the
# default: "128:4096:1"), and attention_bench.py's SDPA rows at D = 128 for the forward bar. (Run 3's script lacked
# the install_prebuilt_extension line, so its attention_bench.py failed to import gproj._C.)
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "conv_bench: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
bin=.prebuilt/bin
install_prebuilt_extension  # (gproj._C for attention_bench.py)
timeout 200 "$bin/cuda_tests" --gtest_filter='Fp16LowRank*:*Fp16LowRankMatchesOracleAndCpu*:ConvertFp16*' >"$out/cuda_tests.log" 2>&1
echo "== cuda_tests: rc=$?; $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \]" "$out/cuda_tests.log" | head
for shape in 128:4096:0 128:4096:1 128:8192:0 128:8192:1 128:16384:0 128:16384:1; do
  for label in baseline gproj gproj-h16; do
    timeout 60 "$bin/cuda_attention_bench" --only "$label" --shape "$shape" --reps 10 | grep -vE '^(variant|#)'
  done
done | tee "$out/bench.txt"
for shape in ${NCU_SHAPES:-128:4096:1}; do
  timeout 120 ncu --metrics gpu__time_duration.sum --csv --print-units base "$bin/cuda_attention_bench" --only gproj-h16 \
    --shape "$shape" --reps 1 >"$out/times_${shape//:/_}.csv" 2>/dev/null
  echo "== ncu times gproj-h16 $shape: rc=$?"
  python3 bench/ncu_times.py "$out/times_${shape//:/_}.csv"
done
PYTHONPATH=python timeout 200 python3 bench/attention_bench.py --reps 10 --warmup 3 --dims 128 --lengths 4096 8192 16384 \
  --out "$out/attention_bench.json" >"$out/attention_bench.txt" 2>&1
echo "== attention_bench.py: rc=$?"
cat "$out/attention_bench.txt"
