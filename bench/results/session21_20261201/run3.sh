#!/usr/bin/env bash
# session 21, run 3: s21-rot (.prebuilt: v3.24, each CTA's query blocks in an order rotated by its key block)
# against main (e23e837): baseline, gproj and gproj-fs, Gaussian both ways, q x 4 and sink, D = 64 N = 1k; ncu
# per-kernel times; then the candidate tests
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r3"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
B=".ab_main .prebuilt"
BENCHES="$B" SHAPES="128:4096:0 128:4096:1" ONLY="baseline gproj gproj-fs" ROUNDS=2 \
  OUT="$out/ab" timeout 120 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab gaussian done at $(( $(date +%s) - t0 )) s"
BENCHES="$B" SHAPES="128:4096:0" INPUTS="q4 sink" ONLY="gproj" ROUNDS=2 \
  OUT="$out/ab_q4" timeout 60 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
BENCHES="$B" SHAPES="64:1024:0 64:1024:1" ONLY="baseline gproj" ROUNDS=2 \
  OUT="$out/ab64" timeout 60 bash scripts/device_bench_ab.sh > "$out/ab64.log" 2>&1
echo "ab q4 sink d64 done at $(( $(date +%s) - t0 )) s"
BENCHES="$B" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian" ONLY="gproj" NCU_ONLY="baseline gproj" ROUNDS=0 NCU=1 \
  OUT="$out/ncu" timeout 100 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt "$out"/ab_q4/ab.txt "$out"/ab64/ab.txt
grep -E "^==|flash_bwd_wg|thresh_dq|dkv" "$out"/ncu/ab_ncu.txt
if [ "${TESTS:-1}" = 1 ]; then
  bash scripts/device_candidate_tests.sh "$out/tests" > "$out/tests.log" 2>&1
  echo "candidate tests rc=$? at $(( $(date +%s) - t0 )) s"
  cat "$out/tests/summary.txt"
  grep -E "FAILED|Failure" "$out/tests/cuda_tests.log" | head -20
fi
tar czf "$OUT/r3.tgz" -C "$OUT" r3
