#!/usr/bin/env bash
# Session 27 run 6: thresh_dq v1.41b (676a2f7: v1.41's sums as a noinline function, the walk's schedule its own
# again) prebuilt in .prebuilt, against v1.41 (.ab_v141: 7eb3b33's cuda_attention_bench) and the kernels before
# it (.ab_s27l: 0e4dde3). The GPU tests, memcheck and racecheck on the small cases, the audit on the GPU with the
# bars, then ncu per kernel of one warm gproj backward, Gaussian and local rows.
#   (run from .ab_s27r/ in the repository root; carry .gproj_commit, .prebuilt, .ab_s27l, .ab_v141, .ab_s27r)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r6"; mkdir -p "$out"
note() { echo "== $1"; }
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
timeout 150 .prebuilt/bin/cuda_tests >"$out/cuda_tests.log" 2>&1
echo "cuda_tests: rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests.log")"
run_sanitizers "$out" .prebuilt/bin/cuda_tests "$small_cases" memcheck racecheck
timeout 60 .prebuilt/bin/gproj check --suite stress --device all --quiet --json "$out/check.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check.txt" 2>&1
echo "gproj check --device all: rc=$?"
grep -E " cuda " "$out/check.txt" | grep -E "gproj" | grep -E "real" | head -4
echo "checks done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_s27l .ab_v141 .prebuilt" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian local" ONLY="gproj" \
  NCU_ONLY="gproj" ROUNDS=0 NCU=1 OUT="$out/ncu" timeout 150 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
grep -E "^==|thresh_dq" "$out"/ncu/ab_ncu.txt | cut -c1-150
(grep -E "PASSED|FAILED" "$out/cuda_tests.log" | tail -2; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$out"/sanitizer_*.log) > "$out/run6_cuda_tests_summary.txt"
cp "$out"/ncu/ab_ncu.txt "$out/run6_ab_ncu.txt"
tar czf "$OUT/r6.tgz" -C "$OUT" r6
