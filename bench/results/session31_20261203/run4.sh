#!/usr/bin/env bash
# Session 30 run 4: the session's final kernels (.pb_final: eig v1.50b, gram as at the start): the GPU tests, memcheck
# on the small cases, the audit with the bars; bench rows of baseline and gproj side by side (D = 128, N = 4k and
# 8k, causal and not, three rounds) for the overhead ratio; and two more per-kernel ncu samples each of the start
# and of the cluster probe (.ab_probe_cluster), for run 3's reading that a cluster launch before the main kernel
# slows it.
#   (run from .ab_s30r/ in the repository root; carry .prebuilt (debs), .pb_final, .ab_s30-start, .ab_probe_cluster, .ab_s30r)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r4"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/v && tar xJf .pb_final/pack.tar.xz -C /tmp/v
T=/tmp/v/bin
timeout 200 $T/cuda_tests >"$out/cuda_tests.log" 2>&1
echo "cuda_tests final: rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests.log")"
run_sanitizers "$out" $T/cuda_tests "$small_cases:Awkward/CudaSweep.ThreshLowRankMatchesOracleAndCpu/q200_k64_h4x1_d64*" memcheck
timeout 60 $T/gproj check --suite stress --device all --quiet --json "$out/check.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check.txt" 2>&1
echo "gproj check --device all (final): rc=$?"
grep -E " cuda " "$out/check.txt" | grep -E "gproj" | grep -E "real|sharp-rows-d128" | head -6
echo "checks done at $(( $(date +%s) - t0 )) s"
BENCHES=".pb_final" SHAPES="128:4096:0 128:4096:1 128:8192:0 128:8192:1" INPUTS="gaussian" ONLY="baseline gproj" ROUNDS=3 \
  OUT="$out/rows" timeout 200 bash scripts/device_bench_ab.sh > "$out/rows.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
grep -E "gproj|baseline" "$out"/rows/ab.txt | sort -k1,1 -k2,2n -k4,4 | head -30
for s in a b; do
  BENCHES=".ab_s30-start .ab_probe_cluster" SHAPES="128:4096:0" INPUTS="gaussian" ONLY="gproj" NCU_ONLY="gproj" ROUNDS=0 NCU=1 \
    OUT="$out/ncu_$s" timeout 100 bash scripts/device_bench_ab.sh > "$out/ncu_$s.log" 2>&1
  grep -E "^==|probe|flash_bwd" "$out"/ncu_$s/ab_ncu.txt | cut -c1-110
done
echo "ncu done at $(( $(date +%s) - t0 )) s"
(grep -E "PASSED|FAILED" "$out/cuda_tests.log" | tail -3; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$out"/sanitizer_*.log) > "$out/cuda_tests_summary.txt"
tar czf "$OUT/r4.tgz" -C "$OUT" r4 && rm -rf "$out"
