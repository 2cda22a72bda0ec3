#!/usr/bin/env bash
# Session 30 run 2: basis_kernel v1.49 (Gram + eigenvectors in one cluster kernel, same bits of U) and v1.50 (Y = G X
# over all threads, one lane reduction per column in the orthonormalisation) against the session's start
# (.ab_s30-start, d0b555d). v1.50: the GPU tests, memcheck and racecheck on the small cases, the audit with the
# bars; v1.49: the audit (its numbers should equal the start's to the digit). Per-kernel ncu times and bench rows.
#   (run from .ab_s30r/ in the repository root; carry .prebuilt (debs), .pb_v149, .pb_v150, .ab_s30-start, .ab_s30r)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r2"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
for v in v149 v150; do mkdir -p /tmp/$v && tar xJf .pb_$v/pack.tar.xz -C /tmp/$v; done
T=/tmp/v150/bin
timeout 200 $T/cuda_tests >"$out/cuda_tests.log" 2>&1
echo "cuda_tests v1.50: rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests.log")"
run_sanitizers "$out" $T/cuda_tests "$small_cases:Awkward/CudaSweep.ThreshLowRankMatchesOracleAndCpu/q200_k64_h4x1_d64*" memcheck racecheck
for v in v150 v149; do
  timeout 60 /tmp/$v/bin/gproj check --suite stress --device all --quiet --json "$out/check_$v.json" \
    --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_$v.txt" 2>&1
  echo "gproj check --device all ($v): rc=$?"
  grep -E " cuda " "$out/check_$v.txt" | grep -E "gproj" | grep -E "real|sharp-rows-d128" | head -6
done
echo "checks done at $(( $(date +%s) - t0 )) s"
B3=".ab_s30-start .pb_v149 .pb_v150"
BENCHES="$B3" SHAPES="128:4096:0 64:1024:0" INPUTS="gaussian" ONLY="gproj" NCU_ONLY="gproj" ROUNDS=0 NCU=1 \
  OUT="$out/ncu" timeout 150 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
grep -E "^==|basis|gram|eig_|flash_bwd|preprocess" "$out"/ncu/ab_ncu.txt | cut -c1-110
BENCHES="$B3" SHAPES="128:4096:0 128:4096:1 64:1024:0" INPUTS="gaussian" ONLY="gproj" ROUNDS=2 \
  OUT="$out/rows" timeout 200 bash scripts/device_bench_ab.sh > "$out/rows.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
grep -E "gproj" "$out"/rows/ab.txt | sort -k1,1 -k2,2n -k4,4 -k11,11 | head -30
(grep -E "PASSED|FAILED" "$out/cuda_tests.log" | tail -3; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$out"/sanitizer_*.log) > "$out/cuda_tests_summary.txt"
tar czf "$OUT/r2.tgz" -C "$OUT" r2 && rm -rf "$out"
