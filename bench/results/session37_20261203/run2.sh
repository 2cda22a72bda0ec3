#!/usr/bin/env bash
# Session 37 run 2 (H200): v3.44 (.pb_c1, branch s37-dkfuse: thresh_dq also forms dK, per head, in the main
# kernel's last wave; D = 128 non-causal): its GPU tests, memcheck, synccheck and racecheck on the small cases, the
# audit with the bars; rows beside main's (f1cbb7d, .pb_m37, bench only), two rounds.
# (run from the repository root; carry .deps (runtime debs), .pb_m37, .pb_c1)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r2"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/c1 && tar xJf .pb_c1/pack.tar.xz -C /tmp/c1
timeout 150 /tmp/c1/bin/cuda_tests >"$out/cuda_tests_c1.log" 2>&1
echo "cuda_tests v3.44 ($(cat .pb_c1/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_c1.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/c1/bin/cuda_tests "$small_cases" memcheck synccheck racecheck
timeout 100 /tmp/c1/bin/gproj check --suite stress --device all --quiet --json "$out/check_c1.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_c1.txt" 2>&1
echo "gproj check --device all (v3.44): rc=$? at $(( $(date +%s) - t0 )) s"
tail -1 "$out/check_c1.txt"
BENCHES=".pb_m37 .pb_c1" SHAPES="128:4096:0 128:8192:0 128:4096:1 64:4096:0" INPUTS="gaussian q4" \
  ONLY="baseline gproj-fb" ROUNDS=2 OUT="$out/ab" timeout 240 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s (rc=$?)"
ab_summary "$out"/ab/ab.txt
tar czf "$OUT/r2.tgz" -C "$OUT" r2 && rm -rf "$out"
