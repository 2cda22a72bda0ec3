#!/usr/bin/env bash
# Prepared in session 21 as its run 4 (not run: no device was lent): the statistics record's atomics moved or
# replaced. Builds: main (.ab_main, e23e837's kernels); main with ABLATE=4 (.ab_main_ablate4: no record atomics, the
# bound); the candidate packs in $PACKS (default ".ab_s22-r1 .ab_s22-rb": v3.25a and v3.26 from the patches beside
# this script); .prebuilt (default: v3.25), whose tests run last. Run from the repository root:
#   bash DIR/record-ab.sh  (DIR a carried folder at the repository root holding this script, e.g. .ab_s22/;
#   outputs in $OUT/r4.tgz; about 5 minutes with the tests, TESTS=0 skips them)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r4"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
PACKS=${PACKS:-.ab_s22-r1 .ab_s22-rb}
B=".ab_main $PACKS .prebuilt"
BENCHES="$B .ab_main_ablate4" SHAPES="128:4096:0 128:4096:1" ONLY="gproj" ROUNDS=2 \
  OUT="$out/ab" timeout 150 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab gaussian done at $(( $(date +%s) - t0 )) s"
BENCHES="$B" SHAPES="128:4096:0" INPUTS="q4 sink" ONLY="gproj" ROUNDS=2 \
  OUT="$out/ab_q4" timeout 80 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
BENCHES="$B" SHAPES="64:1024:0 64:1024:1" ONLY="gproj" ROUNDS=2 \
  OUT="$out/ab64" timeout 60 bash scripts/device_bench_ab.sh > "$out/ab64.log" 2>&1
echo "ab q4 sink d64 done at $(( $(date +%s) - t0 )) s"
BENCHES="$B" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian" ONLY="gproj" ROUNDS=0 NCU=1 \
  OUT="$out/ncu" timeout 100 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt "$out"/ab_q4/ab.txt "$out"/ab64/ab.txt
grep -E "^==|flash_bwd_wg" "$out"/ncu/ab_ncu.txt
[ "${TESTS:-1}" = 1 ] && candidate_tests_report "$out/tests" "$t0"
tar czf "$OUT/r4.tgz" -C "$OUT" r4
