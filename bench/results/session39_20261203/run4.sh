#!/usr/bin/env bash
# Session 39 run 4 (H200): v3.48 (.pb_defer, branch s39-defer: claims at the end of the block, entries a block later): its GPU
# tests, memcheck on the small cases, the audit with the bars; rows beside main's (.ab_red: v3.46's bench,
# main at 9ee052c), two rounds, Gaussian and q x 4; per-kernel ncu times of gproj-fb's backward.
# (run from the repository root; carry .deps, .ab_red, .pb_defer)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r4"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/d && tar xJf .pb_defer/pack.tar.xz -C /tmp/d
timeout 150 /tmp/d/bin/cuda_tests >"$out/cuda_tests.log" 2>&1
echo "cuda_tests v3.48 ($(cat .pb_defer/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/d/bin/cuda_tests "$small_cases" memcheck
timeout 100 /tmp/d/bin/gproj check --suite stress --device all --quiet --json "$out/check.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check.txt" 2>&1
echo "gproj check --device all (v3.48): rc=$? at $(( $(date +%s) - t0 )) s"
tail -1 "$out/check.txt"
BENCHES=".ab_red .pb_defer" SHAPES="128:4096:0 128:4096:1 64:4096:0" INPUTS="gaussian q4" \
  ONLY="baseline gproj-fb" ROUNDS=2 NCU=1 NCU_ONLY="gproj-fb" OUT="$out/ab" timeout 400 bash scripts/device_bench_ab.sh \
  > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s (rc=$?)"
ab_summary "$out"/ab/ab.txt
grep -E "flash_bwd_wg|thresh_dq|commit|shape|==" "$out/ab/ab_ncu.txt" | head -60
tar czf "$OUT/r4.tgz" -C "$OUT" r4 && rm -rf "$out"
