#!/usr/bin/env bash
# Session 37 run 5 (H200): main with the workspace on 128-byte lines alone (54d755d, .pb_m5: cuda_tests and gproj),
# its GPU tests and the audit with the bars.   (run from the repository root; carry .deps (runtime debs), .pb_m5)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
source scripts/device_env.sh
mkdir -p /tmp/m5 && tar xJf .pb_m5/pack.tar.xz -C /tmp/m5
timeout 120 /tmp/m5/bin/cuda_tests >"$OUT/cuda_tests_m5.log" 2>&1
echo "cuda_tests ($(cat .pb_m5/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$OUT/cuda_tests_m5.log") at $(( $(date +%s) - t0 )) s"
timeout 60 /tmp/m5/bin/gproj check --suite stress --device all --quiet --json "$OUT/check_m5.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$OUT/check_m5.txt" 2>&1
echo "gproj check --device all: rc=$? at $(( $(date +%s) - t0 )) s"; tail -1 "$OUT/check_m5.txt"
