#!/usr/bin/env bash
# Session 27 run 5: thresh_dq v1.41 (7eb3b33: the warp's rows' list scalars formed once per warp, entries across
# lanes) prebuilt in .prebuilt, against main's kernels (.ab_s27l: 0e4dde3). The GPU tests, memcheck and racecheck on
# the small cases, the audit on the GPU with the bars, ncu per kernel of one warm gproj backward (local, q x 4 and
# Gaussian rows), then gproj's bench rows both ways.
#   (run from .ab_s27r/ in the repository root; carry .gproj_commit, .prebuilt, .ab_s27l, .ab_s27r)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r5"; mkdir -p "$out"
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
grep -E " cuda " "$out/check.txt" | grep -E "gproj" | grep -E "real|sharp|sink" | head -8
echo "checks done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_s27l .prebuilt" SHAPES="128:4096:0 128:4096:1" INPUTS="local q4 gaussian" ONLY="gproj" NCU_ONLY="gproj" \
  ROUNDS=0 NCU=1 OUT="$out/ncu" timeout 200 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
grep -E "^==|thresh|total" "$out"/ncu/ab_ncu.txt | cut -c1-150
BENCHES=".ab_s27l .prebuilt" SHAPES="128:4096:0" INPUTS="local gaussian" ONLY="gproj" \
  ROUNDS=2 OUT="$out/ab" timeout 200 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt
cp "$out"/ncu/ab_ncu.txt "$out/run5_ab_ncu.txt"; cp "$out"/ab/ab.txt "$out/run5_ab_rows.txt"
tar czf "$OUT/r5.tgz" -C "$OUT" r5
