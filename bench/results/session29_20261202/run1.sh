#!/usr/bin/env bash
# Session 29 run 1: v3.36 (the main kernel's bf16(K U) from ku_kernel on the pre-pass stream) and thresh_dq v1.47
# (a listed entry's K row from k_head), prebuilt in .prebuilt: the GPU tests, memcheck and racecheck on the small
# cases (and a D = 64 case of several rows per warp), the audit on the GPU with the bars (the stress suite now has
# sharp-rows-d128). Then ncu per kernel of one warm gproj backward against the session's start (.ab_main: bb4f38b),
# D = 128 N = 4k and D = 64 N = 1k, causal and not, Gaussian, local and q x 4 rows; bench rows of both builds.
#   (run from .ab_s29r/ in the repository root; carry .gproj_commit, .prebuilt, .ab_main, .ab_s29r)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r1"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
timeout 150 .prebuilt/bin/cuda_tests >"$out/cuda_tests.log" 2>&1
echo "cuda_tests: rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests.log")"
run_sanitizers "$out" .prebuilt/bin/cuda_tests "$small_cases:Awkward/CudaSweep.ThreshLowRankMatchesOracleAndCpu/q200_k64_h4x1_d64*" memcheck racecheck
timeout 60 .prebuilt/bin/gproj check --suite stress --device all --quiet --json "$out/check.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check.txt" 2>&1
echo "gproj check --device all: rc=$?"
grep -E " cuda " "$out/check.txt" | grep -E "gproj" | grep -E "real|sharp-rows-d128" | head -6
echo "checks done at $(( $(date +%s) - t0 )) s"
B2=".ab_main .prebuilt"
BENCHES="$B2" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian local q4" ONLY="gproj" \
  NCU_ONLY="gproj" ROUNDS=0 NCU=1 OUT="$out/ncu128" timeout 200 bash scripts/device_bench_ab.sh > "$out/ncu128.log" 2>&1
echo "ncu 128 done at $(( $(date +%s) - t0 )) s"
grep -E "^==|flash_bwd|thresh_dq|ku_kernel|eig_kernel|gram_kernel|preprocess" "$out"/ncu128/ab_ncu.txt | cut -c1-110 | head -60
BENCHES="$B2" SHAPES="64:1024:0 64:1024:1" INPUTS="gaussian q4" ONLY="gproj" \
  NCU_ONLY="gproj" ROUNDS=0 NCU=1 OUT="$out/ncu64" timeout 150 bash scripts/device_bench_ab.sh > "$out/ncu64.log" 2>&1
echo "ncu 64 done at $(( $(date +%s) - t0 )) s"
grep -E "^==|flash_bwd|thresh_dq|ku_kernel" "$out"/ncu64/ab_ncu.txt | cut -c1-110
BENCHES="$B2" SHAPES="128:4096:0 128:4096:1 64:1024:0 64:1024:1" INPUTS="gaussian local" ONLY="baseline gproj" ROUNDS=2 \
  OUT="$out/rows" timeout 180 bash scripts/device_bench_ab.sh > "$out/rows.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
grep -E "gproj|baseline" "$out"/rows/ab.txt | sort -k1,1 -k2,2n -k4,4 -k9,9 | head -70
(grep -E "PASSED|FAILED" "$out/cuda_tests.log" | tail -2; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$out"/sanitizer_*.log) > "$out/run1_cuda_tests_summary.txt"
cp "$out"/ncu128/ab_ncu.txt "$out/run1_ncu128.txt"; cp "$out"/ncu64/ab_ncu.txt "$out/run1_ncu64.txt"
cp "$out"/rows/ab.txt "$out/run1_rows.txt"; cp "$out/check.txt" "$out/run1_check.txt"
tar czf "$OUT/r1.tgz" -C "$OUT" r1
