#!/usr/bin/env bash
# Session 36 run 4 (H200): v3.43e (.pb_d64, branch s36-d64: the main kernel's per-head count takes its head from
# blockIdx, and thresh_dq is the main kernel's programmatic dependent at D = 64 too): its GPU tests, memcheck and
# synccheck on the small cases, the audit with the bars; rows beside main's (a5ecd6c, .pb_m36, bench only), two
# rounds.   (run from the repository root; carry .deps (runtime debs), .pb_m36, .pb_d64)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r4"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/d64 && tar xJf .pb_d64/pack.tar.xz -C /tmp/d64
timeout 150 /tmp/d64/bin/cuda_tests >"$out/cuda_tests_d64.log" 2>&1
echo "cuda_tests v3.43e ($(cat .pb_d64/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_d64.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/d64/bin/cuda_tests "$small_cases" memcheck synccheck
timeout 100 /tmp/d64/bin/gproj check --suite stress --device all --quiet --json "$out/check_d64.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_d64.txt" 2>&1
echo "gproj check --device all (v3.43e): rc=$? at $(( $(date +%s) - t0 )) s"
tail -1 "$out/check_d64.txt"
BENCHES=".pb_m36 .pb_d64" SHAPES="64:4096:0 64:4096:1 64:1024:1 128:4096:0 128:4096:1" INPUTS="gaussian" \
  ONLY="baseline gproj-fb" ROUNDS=2 OUT="$out/ab" timeout 200 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s (rc=$?)"
ab_summary "$out"/ab/ab.txt
tar czf "$OUT/r4.tgz" -C "$OUT" r4 && rm -rf "$out"
