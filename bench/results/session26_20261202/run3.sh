#!/usr/bin/env bash
# Session 26 run 3: v3.35 (gproj's dK-only postprocess as its own kernel) prebuilt in .prebuilt. The GPU tests,
# memcheck on the small cases, the audit on the GPU with the bars, then gproj's bench rows against main's kernels
# (.ab_s26m: cf4a62a's cuda_attention_bench) both ways, and ncu per kernel of one warm backward at D = 128, N = 4k.
#   (run from .ab_s26r3/ in the repository root)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
timeout 150 .prebuilt/bin/cuda_tests >"$out/cuda_tests.log" 2>&1
echo "cuda_tests: rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests.log")"
run_sanitizers "$out" .prebuilt/bin/cuda_tests "$small_cases" memcheck
timeout 60 .prebuilt/bin/gproj check --suite stress --device all --quiet --json "$out/check.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check.txt" 2>&1
echo "gproj check --device all: rc=$?"
grep -E " cuda " "$out/check.txt" | grep -E "gproj" | head -16
BENCHES=".ab_s26m .prebuilt" SHAPES="128:4096:0 128:4096:1 64:1024:0 128:16384:0" INPUTS="gaussian" ONLY="baseline gproj" \
  ROUNDS=2 OUT="$out/ab" timeout 300 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_s26m .prebuilt" SHAPES="128:4096:0" INPUTS="gaussian" ONLY="gproj" NCU_ONLY="gproj" \
  ROUNDS=0 NCU=1 OUT="$out/ncu" timeout 150 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt
grep -E "^==|flash_bwd_wg|thresh|postprocess|total" "$out"/ncu/ab_ncu.txt | cut -c1-150
tar czf "$OUT/r.tgz" -C "$OUT" r
