#!/usr/bin/env bash
# Session 34 run 1 (H200): two candidates on one branch and the record probe.
#   .pb_both (branch s34-both: forward v2.9, Q held in registers so that S = Q K^T reads only K from shared
#            memory; backward v3.41, the statistics record by one 16-byte atomic per lane): its GPU tests,
#            compute-sanitizer memcheck / synccheck on the small cases and the forward's q97 ones, the
#            audit with the bars; then forward / backward rows against main's (.pb_main, bbfb048's kernels).
#            The two changes touch different kernels: the forward rows measure v2.9, the backward rows v3.41.
#   .pb_rec  (branch probe/record 55b0da6, bench only): GPROJ_PROBE_SKIP_RECORD=1 skips the record's atomics at
#            run time (the gradients are then wrong), keeping their code (its SASS is main's).
#   (run from the repository root; carry .deps holding only the runtime debs, .pb_main, .pb_rec, .pb_both: the
#   carry limit is 64 MiB with the tree)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r1"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/both /tmp/rec && tar xJf .pb_both/pack.tar.xz -C /tmp/both && tar xJf .pb_rec/bench.tar.xz -C /tmp/rec
timeout 150 /tmp/both/bin/cuda_tests >"$out/cuda_tests_both.log" 2>&1
echo "cuda_tests both ($(cat .pb_both/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_both.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/both/bin/cuda_tests "$small_cases:*WgmmaForward*q97*" memcheck synccheck
echo "sanitizers at $(( $(date +%s) - t0 )) s"
timeout 90 /tmp/both/bin/gproj check --suite stress --device all --quiet --json "$out/check_both.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_both.txt" 2>&1
echo "gproj check --device all (both): rc=$? at $(( $(date +%s) - t0 )) s"
for r in 1 2 3; do
  for shape in 128:4096:0 128:4096:1; do
    for args in "" "--q-scale 4"; do
      for skip in 0 1; do
        # shellcheck disable=SC2086
        echo "probe skip=$skip r$r $args $(GPROJ_PROBE_SKIP_RECORD=$skip timeout 60 /tmp/rec/cuda_attention_bench --only gproj-fb --shape $shape $args --reps 5 2>/dev/null | grep -vE '^(variant|#)')"
      done
    done
  done
done | tee "$out/probe_rows.txt"
echo "probe done at $(( $(date +%s) - t0 )) s"
BENCHES=".pb_main .pb_both" SHAPES="128:4096:0 128:4096:1 128:8192:0 64:4096:0" INPUTS="gaussian" \
  ONLY="baseline gproj-fb" ROUNDS=3 OUT="$out/ab" timeout 240 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
grep -vE '^#' "$out"/ab/ab.txt | sort -k2,2n -k3,3n -k4,4 -k9,9 -k1,1 -k11,11 | awk '{print $1,$2,$3,$4,$5,$6,$9,$10,$11}'
# The forward kernel's limits (shared-memory and tensor pipes, stalls) of both builds, if time is left
if [ $(( $(date +%s) - t0 )) -lt 380 ]; then
  BENCHES=".pb_main .pb_both" SHAPES="128:4096:0" INPUTS="gaussian" ROUNDS=0 NCU_LIMITS=1 NCU_ONLY=baseline \
    NCU_KERNEL=flash_fwd_wg OUT="$out/ncu" timeout 120 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
  echo "ncu done at $(( $(date +%s) - t0 )) s (rc=$?)"
  head -60 "$out/ncu/ab_limits.txt" 2>/dev/null
fi
tar czf "$OUT/r1.tgz" -C "$OUT" r1 && rm -rf "$out"
