#!/usr/bin/env bash
# Session 29 run 3: v3.37 (the pre-passes queued after the delta preprocess, from a fork point recorded before
# it), prebuilt in .prebuilt, against the same kernels with the old launch order (.ab_chainA: 67e93bb, whose bench
# has --chain too): the GPU tests, memcheck and racecheck on the small cases, the audit with the bars; then bench
# rows of both builds as they have been measured (one call after the GPU has drained) and with --chain 8 (the
# mean of 8 calls back to back), to split the backward's time beyond its kernels' into the host's launches at the
# call's start and what the GPU itself does.
#   (run from .ab_s29r/ in the repository root; carry .gproj_commit, .prebuilt, .ab_chainA, .ab_s29r)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r3"; mkdir -p "$out"
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
B2=".ab_chainA .prebuilt"
BENCHES="$B2" SHAPES="128:4096:0 128:4096:1 64:1024:0 64:1024:1" INPUTS="gaussian" ONLY="baseline gproj" ROUNDS=3 \
  OUT="$out/rows" timeout 200 bash scripts/device_bench_ab.sh > "$out/rows.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
grep -E "gproj|baseline" "$out"/rows/ab.txt | sort -k1,1 -k2,2n -k4,4 -k11,11 | head -60
BENCHES="$B2" SHAPES="128:4096:0 128:4096:1 64:1024:0 64:1024:1" INPUTS="gaussian" ONLY="baseline gproj" ROUNDS=2 \
  BENCH_ARGS="--chain 8" OUT="$out/chain" timeout 240 bash scripts/device_bench_ab.sh > "$out/chain.log" 2>&1
echo "chain rows done at $(( $(date +%s) - t0 )) s"
grep -E "gproj|baseline" "$out"/chain/ab.txt | sort -k1,1 -k2,2n -k4,4 -k11,11 | head -40
(grep -E "PASSED|FAILED" "$out/cuda_tests.log" | tail -2; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$out"/sanitizer_*.log) > "$out/run3_cuda_tests_summary.txt"
cp "$out"/rows/ab.txt "$out/run3_rows.txt"; cp "$out"/chain/ab.txt "$out/run3_rows_chain8.txt"; cp "$out/check.txt" "$out/run3_check.txt"
tar czf "$OUT/r3.tgz" -C "$OUT" r3
