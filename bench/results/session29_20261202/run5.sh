#!/usr/bin/env bash
# Session 29 run 5: v3.38 (thresh-lowrank's pre-passes in order on the caller's stream after the delta preprocess,
# no side streams), prebuilt in .prebuilt, against v3.37 (.ab_v337: 61c28c0's bench, from its .prebuilt): the GPU
# tests, memcheck and racecheck on the small cases, the audit with the bars; bench rows of both builds, D = 128
# N = 4k and D = 64 N = 1k, causal and not, Gaussian and local rows.
#   (run from .ab_s29r/ in the repository root; carry .gproj_commit, .prebuilt, .ab_v337, .ab_s29r)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r5"; mkdir -p "$out"
note() { echo "== $1"; }
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
timeout 150 .prebuilt/bin/cuda_tests >"$out/cuda_tests.log" 2>&1
echo "cuda_tests: rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests.log")"
run_sanitizers "$out" .prebuilt/bin/cuda_tests "$small_cases:Awkward/CudaSweep.ThreshLowRankMatchesOracleAndCpu/q200_k64_h4x1_d64*" memcheck racecheck
timeout 60 .prebuilt/bin/gproj check --suite stress --device all --quiet --json "$out/check.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check.txt" 2>&1
echo "gproj check --device all: rc=$?"
grep -E " cuda " "$out/check.txt" | grep -E "gproj" | grep -E "real" | head -4
echo "checks done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_v337 .prebuilt" SHAPES="128:4096:0 128:4096:1 64:1024:0 64:1024:1" INPUTS="gaussian local" ONLY="gproj" \
  ROUNDS=3 OUT="$out/rows" timeout 200 bash scripts/device_bench_ab.sh > "$out/rows.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
grep -E "gproj" "$out"/rows/ab.txt | sort -k1,1 -k2,2n -k4,4 -k10,10 -k12,12 | head -60
(grep -E "PASSED|FAILED" "$out/cuda_tests.log" | tail -2; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$out"/sanitizer_*.log) > "$out/run5_cuda_tests_summary.txt"
cp "$out"/rows/ab.txt "$out/run5_rows.txt"; cp "$out/check.txt" "$out/run5_check.txt"
tar czf "$OUT/r5.tgz" -C "$OUT" r5
