#!/usr/bin/env bash
# Session 35 run 1 (H200): forward v2.10 (branch s35-st4: v2.8's ring, two S buffers, S of block jb + 2 issued
# beside P V of block jb, five K, V stages) against main's forward (v2.9, a1d60cf's kernels).
#   .pb_v210 (pack: cuda_tests, gproj, cuda_attention_bench): its GPU tests, compute-sanitizer memcheck /
#            synccheck / racecheck on the small cases and the forward's q97 ones, the audit with the bars; then
#            forward / backward rows beside main's (.pb_m35, cuda_attention_bench alone), three rounds.
#   Then, if time is left, ncu limits of the forward kernel (baseline and gproj-fb) of both builds.
#   (run from the repository root; carry .deps holding only the runtime debs, .pb_m35, .pb_v210: the carry limit
#   is 64 MiB with the tree)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r1"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/v210 && tar xJf .pb_v210/pack.tar.xz -C /tmp/v210
timeout 150 /tmp/v210/bin/cuda_tests >"$out/cuda_tests_v210.log" 2>&1
echo "cuda_tests v2.10 ($(cat .pb_v210/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_v210.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/v210/bin/cuda_tests "$small_cases:*WgmmaForward*q97*" memcheck synccheck
mkdir -p "$out/fwd" && run_sanitizers "$out/fwd" /tmp/v210/bin/cuda_tests "*WgmmaForward*q97*" racecheck
echo "sanitizers at $(( $(date +%s) - t0 )) s"
timeout 90 /tmp/v210/bin/gproj check --suite stress --device all --quiet --json "$out/check_v210.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_v210.txt" 2>&1
echo "gproj check --device all (v2.10): rc=$? at $(( $(date +%s) - t0 )) s"
BENCHES=".pb_m35 .pb_v210" SHAPES="128:4096:0 128:4096:1 128:8192:0 64:4096:0" INPUTS="gaussian" \
  ONLY="baseline gproj-fb" ROUNDS=3 OUT="$out/ab" timeout 240 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
BENCHES=".pb_m35 .pb_v210" SHAPES="128:4096:0" INPUTS="gaussian" ONLY="gproj-fs" ROUNDS=2 OUT="$out/ab_fs" \
  timeout 60 bash scripts/device_bench_ab.sh > "$out/ab_fs.log" 2>&1
echo "gproj-fs rows done at $(( $(date +%s) - t0 )) s"
grep -vhE '^#' "$out"/ab/ab.txt "$out"/ab_fs/ab.txt | sort -k2,2n -k3,3n -k4,4 -k9,9 -k1,1 -k11,11 | awk '{print $1,$2,$3,$4,$5,$6,$9,$10,$11}'
# The forward kernel's limits (tensor and MUFU pipes, issue, stalls) of both builds, if time is left
if [ $(( $(date +%s) - t0 )) -lt 420 ]; then
  BENCHES=".pb_m35 .pb_v210" SHAPES="128:4096:0" INPUTS="gaussian" ROUNDS=0 NCU_LIMITS=1 NCU_ONLY="baseline gproj-fb" \
    NCU_KERNEL=flash_fwd_wg OUT="$out/ncu" timeout 150 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
  echo "ncu done at $(( $(date +%s) - t0 )) s (rc=$?)"
  head -80 "$out/ncu/ab_limits.txt" 2>/dev/null
fi
tar czf "$OUT/r1.tgz" -C "$OUT" r1 && rm -rf "$out"
