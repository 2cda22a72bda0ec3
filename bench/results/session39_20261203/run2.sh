#!/usr/bin/env bash
# Session 39 run 2 (H200): v3.46 (.pb_red, branch s39-red: atomic_add2 / atomic_add_vec<4> as PTX red): its GPU
# tests, memcheck on the small cases, the audit with the bars; rows beside main's kernels (.ab_e: v3.45e's bench,
# whose kernels are main 09dd4b0's), two rounds, Gaussian and q x 4; per-kernel ncu times of gproj-fb's backward.
# (run from the repository root; carry .deps, .ab_e, .pb_red)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r2"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/d && tar xJf .pb_red/pack.tar.xz -C /tmp/d
timeout 150 /tmp/d/bin/cuda_tests >"$out/cuda_tests.log" 2>&1
echo "cuda_tests v3.46 ($(cat .pb_red/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/d/bin/cuda_tests "$small_cases" memcheck
timeout 100 /tmp/d/bin/gproj check --suite stress --device all --quiet --json "$out/check.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check.txt" 2>&1
echo "gproj check --device all (v3.46): rc=$? at $(( $(date +%s) - t0 )) s"
tail -1 "$out/check.txt"
BENCHES=".ab_e .pb_red" SHAPES="128:4096:0 128:4096:1 64:4096:0" INPUTS="gaussian q4" \
  ONLY="baseline gproj-fb" ROUNDS=2 NCU=1 NCU_ONLY="gproj-fb" OUT="$out/ab" timeout 400 bash scripts/device_bench_ab.sh \
  > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s (rc=$?)"
ab_summary "$out"/ab/ab.txt
grep -E "flash_bwd_wg|thresh_dq|commit|shape|==" "$out/ab/ab_ncu.txt" | head -60
tar czf "$OUT/r2.tgz" -C "$OUT" r2 && rm -rf "$out"
