#!/usr/bin/env bash
# Session 31 run 1: K's basis from the forward (Problem::forward_basis, aeaf906; .pb_s31a): the GPU tests (the new
# Cuda.ForwardBasis* among them), memcheck and racecheck on the small cases, the audit with the bars; then bench
# rows of baseline, gproj and gproj-fb side by side (three rounds) for the backward's and the forward's times.
#   (run from the repository root; carry .prebuilt (debs), .pb_s31a, .ab_s31)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r1"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
nvcc --version | tail -2 >> "$out/env.txt" 2>&1
mkdir -p /tmp/v && tar xJf .pb_s31a/pack.tar.xz -C /tmp/v
T=/tmp/v/bin
timeout 200 $T/cuda_tests >"$out/cuda_tests.log" 2>&1
echo "cuda_tests: rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests.log")"
grep -E "ForwardBasis" "$out/cuda_tests.log" | grep -E "OK|FAILED" | head -4
run_sanitizers "$out" $T/cuda_tests "$small_cases" memcheck racecheck
timeout 60 $T/gproj check --suite stress --device all --quiet --json "$out/check.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check.txt" 2>&1
echo "gproj check --device all: rc=$?"
grep -E " cuda " "$out/check.txt" | grep -E "gproj" | grep -E "real|sharp-rows-d128" | head -6
echo "checks done at $(( $(date +%s) - t0 )) s"
BENCHES=".pb_s31a" SHAPES="128:4096:0 128:4096:1 128:8192:0 128:8192:1 128:1024:0 64:4096:0" INPUTS="gaussian" \
  ONLY="baseline gproj gproj-fb" ROUNDS=3 OUT="$out/rows" timeout 300 bash scripts/device_bench_ab.sh > "$out/rows.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
grep -E "gproj|baseline" "$out"/rows/ab.txt | sort -k2,2n -k3,3n -k4,4 -k1,1 | head -60
(grep -E "PASSED|FAILED" "$out/cuda_tests.log" | tail -3; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$out"/sanitizer_*.log) > "$out/cuda_tests_summary.txt"
tar czf "$OUT/r1.tgz" -C "$OUT" r1 && rm -rf "$out"
