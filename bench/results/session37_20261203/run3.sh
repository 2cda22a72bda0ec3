#!/usr/bin/env bash
# Session 37 run 3 (H200): v3.44b (.pb_c2, branch s37-dkfuse: v3.44 with dk_ticket in 128 bytes of its own, so that
# the later workspace regions keep their 128-byte alignment): its GPU tests, memcheck and synccheck on the small
# cases, the audit with the bars; rows beside main's (f1cbb7d, .pb_m37, bench only), two rounds.
# (run from the repository root; carry .deps (runtime debs), .pb_m37, .pb_c2)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r3"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/c2 && tar xJf .pb_c2/pack.tar.xz -C /tmp/c2
timeout 150 /tmp/c2/bin/cuda_tests >"$out/cuda_tests_c2.log" 2>&1
echo "cuda_tests v3.44b ($(cat .pb_c2/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_c2.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/c2/bin/cuda_tests "$small_cases" memcheck synccheck
timeout 100 /tmp/c2/bin/gproj check --suite stress --device all --quiet --json "$out/check_c2.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_c2.txt" 2>&1
echo "gproj check --device all (v3.44b): rc=$? at $(( $(date +%s) - t0 )) s"
tail -1 "$out/check_c2.txt"
BENCHES=".pb_m37 .pb_c2" SHAPES="128:4096:0 128:8192:0 128:4096:1 64:4096:0" INPUTS="gaussian q4" \
  ONLY="baseline gproj-fb" ROUNDS=2 OUT="$out/ab" timeout 240 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s (rc=$?)"
ab_summary "$out"/ab/ab.txt
tar czf "$OUT/r3.tgz" -C "$OUT" r3 && rm -rf "$out"
