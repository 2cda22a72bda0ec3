#!/usr/bin/env bash
# Session 38 run 2 (H200): v3.45b (.pb_c2, branch s38-pre: the delta preprocess without shared memory, rows in memory order)
# and v3.45c (.ab_s38-pre-smem, bench only: the shared-memory preprocess, rows in memory order): v3.45b's GPU
# tests, memcheck on the small cases, the audit with the bars; rows beside main's (d1e83d4, .ab_main,
# bench only), two rounds; then each build's per-kernel times of one backward (ncu, warm caches).
# (run from the repository root; carry .deps (runtime debs), .ab_main, .pb_c2, .ab_s38-pre-smem)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r2"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/c1 && tar xJf .pb_c2/pack.tar.xz -C /tmp/c1
timeout 150 /tmp/c1/bin/cuda_tests >"$out/cuda_tests_c2.log" 2>&1
echo "cuda_tests v3.45b ($(cat .pb_c2/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_c2.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/c1/bin/cuda_tests "$small_cases" memcheck
timeout 100 /tmp/c1/bin/gproj check --suite stress --device all --quiet --json "$out/check_c2.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_c2.txt" 2>&1
echo "gproj check --device all (v3.45b): rc=$? at $(( $(date +%s) - t0 )) s"
tail -1 "$out/check_c2.txt"
BENCHES=".ab_main .pb_c2 .ab_s38-pre-smem" SHAPES="128:4096:0 128:4096:1 64:4096:0" INPUTS="gaussian" \
  ONLY="baseline gproj-fb" ROUNDS=2 OUT="$out/ab" timeout 240 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s (rc=$?)"
ab_summary "$out"/ab/ab.txt
BENCHES=".ab_main .pb_c2 .ab_s38-pre-smem" SHAPES="128:4096:0 64:4096:0" INPUTS="gaussian" ROUNDS=0 NCU=1 NCU_ONLY="baseline gproj-fb" \
  OUT="$out/ncu" timeout 200 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s (rc=$?)"
grep -E "^==|preprocess|flash_bwd_wg" "$out"/ncu/ab_ncu.txt | head -60
tar czf "$OUT/r2.tgz" -C "$OUT" r2 && rm -rf "$out"
