#!/usr/bin/env bash
# Session 23 (copy of session 22's): candidate packs against main's, side by side (bench rows on Gaussian, q x 4, sink and D = 64 inputs,
# then ncu per kernel on Gaussian rows), and, when TESTS=1, scripts/device_candidate_tests.sh on .prebuilt.
#   PACKS=".ab_main .ab_s22-pro ..." [TESTS=1] bash .ab_s23/ab.sh   (outputs in $OUT/r.tgz)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT PACKS=$PACKS" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1" ONLY="${ONLY:-gproj}" ROUNDS=2 \
  OUT="$out/ab" timeout 150 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab gaussian done at $(( $(date +%s) - t0 )) s"
BENCHES="$PACKS" SHAPES="128:4096:0" INPUTS="q4 sink" ONLY="gproj" ROUNDS=2 \
  OUT="$out/ab_q4" timeout 100 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
BENCHES="$PACKS" SHAPES="64:1024:0 64:1024:1" ONLY="gproj" ROUNDS=2 \
  OUT="$out/ab64" timeout 80 bash scripts/device_bench_ab.sh > "$out/ab64.log" 2>&1
echo "ab q4 sink d64 done at $(( $(date +%s) - t0 )) s"
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian" ONLY="${NCU_ONLY:-gproj}" ROUNDS=0 NCU=1 \
  OUT="$out/ncu" timeout 120 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt "$out"/ab_q4/ab.txt "$out"/ab64/ab.txt
grep -E "^==|flash_bwd_wg|thresh" "$out"/ncu/ab_ncu.txt
grep -il "mismatch\|wrong\|FAIL" "$out"/*/bench.err 2>/dev/null | head
[ "${TESTS:-0}" = 1 ] && candidate_tests_report "$out/tests" "$t0"
tar czf "$OUT/r.tgz" -C "$OUT" r
