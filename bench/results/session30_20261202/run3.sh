#!/usr/bin/env bash
# Session 30 run 3: eig_kernel v1.50b (v1.50's eigen-iteration steps on the two-kernel form; the chunk sums two
# chunks deep) against the session's start (.ab_s30-start): the GPU tests, memcheck and racecheck on the small cases,
# the audit with the bars; per-kernel ncu times and bench rows. And a probe (.ab_probe_cluster: the start's kernels
# plus a do-nothing cluster kernel of 4 CTAs x 104 KB before the main kernel), per-kernel ncu only: does a cluster
# launch before it slow the main kernel, as run 2's basis_kernel did (+70 µs with identical SASS)?
#   (run from .ab_s30r/ in the repository root; carry .prebuilt (debs), .pb_v150b, .ab_s30-start, .ab_probe_cluster, .ab_s30r)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r3"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/v && tar xJf .pb_v150b/pack.tar.xz -C /tmp/v
T=/tmp/v/bin
timeout 200 $T/cuda_tests >"$out/cuda_tests.log" 2>&1
echo "cuda_tests v1.50b: rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests.log")"
run_sanitizers "$out" $T/cuda_tests "$small_cases:Awkward/CudaSweep.ThreshLowRankMatchesOracleAndCpu/q200_k64_h4x1_d64*" memcheck racecheck
timeout 60 $T/gproj check --suite stress --device all --quiet --json "$out/check.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check.txt" 2>&1
echo "gproj check --device all (v1.50b): rc=$?"
grep -E " cuda " "$out/check.txt" | grep -E "gproj" | grep -E "real|sharp-rows-d128" | head -6
echo "checks done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_s30-start .pb_v150b .ab_probe_cluster" SHAPES="128:4096:0 64:1024:0" INPUTS="gaussian" ONLY="gproj" \
  NCU_ONLY="gproj" ROUNDS=0 NCU=1 OUT="$out/ncu" timeout 150 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
grep -E "^==|gram|eig_|probe|flash_bwd" "$out"/ncu/ab_ncu.txt | cut -c1-110
BENCHES=".ab_s30-start .pb_v150b" SHAPES="128:4096:0 128:4096:1 64:1024:0 64:1024:1" INPUTS="gaussian" ONLY="gproj" ROUNDS=3 \
  OUT="$out/rows" timeout 200 bash scripts/device_bench_ab.sh > "$out/rows.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
grep -E "gproj" "$out"/rows/ab.txt | sort -k1,1 -k2,2n -k4,4 -k11,11 | head -30
(grep -E "PASSED|FAILED" "$out/cuda_tests.log" | tail -3; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$out"/sanitizer_*.log) > "$out/cuda_tests_summary.txt"
tar czf "$OUT/r3.tgz" -C "$OUT" r3 && rm -rf "$out"
