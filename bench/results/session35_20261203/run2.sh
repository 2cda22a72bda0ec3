#!/usr/bin/env bash
# Session 35 run 2 (H200): forward v2.11 (branch s35-ilp: the softmax step's row max, fwdfix's top two and row sums as trees
# over the n-tiles instead of chains) against main's forward (v2.9, a1d60cf's kernels).
#   .pb_v211 (pack: cuda_tests, gproj, cuda_attention_bench): its GPU tests, compute-sanitizer memcheck /
#            synccheck / racecheck on the small cases and the forward's q97 ones, the audit with the bars; then
#            forward / backward rows beside main's (.pb_m35, cuda_attention_bench alone), three rounds.
#   Then, if time is left, ncu limits of the forward kernel (baseline and gproj-fb) of both builds.
#   (run from the repository root; carry .deps holding only the runtime debs, .pb_m35, .pb_v211: the carry limit
#   is 64 MiB with the tree)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r2"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/v211 && tar xJf .pb_v211/pack.tar.xz -C /tmp/v211
timeout 150 /tmp/v211/bin/cuda_tests >"$out/cuda_tests_v211.log" 2>&1
echo "cuda_tests v2.11 ($(cat .pb_v211/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_v211.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/v211/bin/cuda_tests "$small_cases:*WgmmaForward*q97*" memcheck synccheck
mkdir -p "$out/fwd" && run_sanitizers "$out/fwd" /tmp/v211/bin/cuda_tests "*WgmmaForward*q97*" racecheck
echo "sanitizers at $(( $(date +%s) - t0 )) s"
timeout 90 /tmp/v211/bin/gproj check --suite stress --device all --quiet --json "$out/check_v211.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_v211.txt" 2>&1
echo "gproj check --device all (v2.11): rc=$? at $(( $(date +%s) - t0 )) s"
BENCHES=".pb_m35 .pb_v211" SHAPES="128:4096:0 128:4096:1 128:8192:0 64:4096:0" INPUTS="gaussian" \
  ONLY="baseline gproj-fb" ROUNDS=3 OUT="$out/ab" timeout 240 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
grep -vhE '^#' "$out"/ab/ab.txt | sort -k2,2n -k3,3n -k4,4 -k9,9 -k1,1 -k11,11 | awk '{print $1,$2,$3,$4,$5,$6,$9,$10,$11}'
# The forward kernel's limits (tensor and MUFU pipes, issue, stalls) of both builds, if time is left
if [ $(( $(date +%s) - t0 )) -lt 420 ]; then
  BENCHES=".pb_m35 .pb_v211" SHAPES="128:4096:0" INPUTS="gaussian" ROUNDS=0 NCU_LIMITS=1 NCU_ONLY="baseline gproj-fb" \
    NCU_KERNEL=flash_fwd_wg OUT="$out/ncu" timeout 150 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
  echo "ncu done at $(( $(date +%s) - t0 )) s (rc=$?)"
  head -80 "$out/ncu/ab_limits.txt" 2>/dev/null
fi
tar czf "$OUT/r2.tgz" -C "$OUT" r2 && rm -rf "$out"
