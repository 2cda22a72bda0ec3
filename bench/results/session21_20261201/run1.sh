#!/usr/bin/env bash
# session 21, run 1: main (e23e837); s21-b1 (v3.23a: the statistics product as its own group after the dK, dV
# barrier, the record atomics during the dQ product); main with ABLATE=1 (no statistics product: the bound);
# s21-b3lb (v3.23: the statistics product of a block under the next block's element-wise step; thresh_dq under
# __launch_bounds__(256, 2) at D = 128); s21-b3t (.prebuilt: v3.23 and thresh_dq v1.40, every row's columns loaded
# before the walk, launch bounds (256, 2)); then the candidate tests of s21-b3t
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r1"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv >> "$out/env.txt"
BENCHES=".ab_main .ab_s21-b1 .ab_main_ablate1 .ab_s21-b3lb .prebuilt" SHAPES="128:4096:0 128:4096:1" ONLY="gproj" \
  ROUNDS=2 OUT="$out/ab" timeout 150 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab gaussian done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_main .prebuilt" SHAPES="128:4096:0 128:4096:1" ONLY="baseline" ROUNDS=2 \
  OUT="$out/ab_base" timeout 60 bash scripts/device_bench_ab.sh > "$out/ab_base.log" 2>&1
echo "ab baseline done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_main .ab_s21-b1 .ab_s21-b3lb .prebuilt" SHAPES="128:4096:0" INPUTS="q4 sink" ONLY="gproj" ROUNDS=2 \
  OUT="$out/ab_q4" timeout 120 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
echo "ab q4 sink done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_main .ab_s21-b3lb .prebuilt" SHAPES="128:4096:0" INPUTS="gaussian q4" ONLY="gproj" ROUNDS=0 NCU=1 \
  OUT="$out/ncu" timeout 100 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
BENCHES=".ab_main .prebuilt" SHAPES="64:4096:0" INPUTS="gaussian" ONLY="gproj" ROUNDS=0 NCU=1 \
  OUT="$out/ncu64" timeout 40 bash scripts/device_bench_ab.sh > "$out/ncu64.log" 2>&1
BENCHES=".ab_main" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian" ONLY="baseline" NCU_ONLY="baseline" ROUNDS=0 \
  NCU=1 OUT="$out/ncu_base" timeout 40 bash scripts/device_bench_ab.sh > "$out/ncu_base.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt "$out"/ab_base/ab.txt "$out"/ab_q4/ab.txt
grep -E "^==|flash_bwd_wg|thresh_dq" "$out"/ncu/ab_ncu.txt "$out"/ncu64/ab_ncu.txt
cat "$out"/ncu_base/ab_ncu.txt
if [ "${TESTS:-1}" = 1 ]; then
  bash scripts/device_candidate_tests.sh "$out/tests" > "$out/tests.log" 2>&1
  echo "candidate tests rc=$? at $(( $(date +%s) - t0 )) s"
  cat "$out/tests/summary.txt"
  grep -E "FAILED|Failure" "$out/tests/cuda_tests.log" | head -20
fi
tar czf "$OUT/r1.tgz" -C "$OUT" r1
