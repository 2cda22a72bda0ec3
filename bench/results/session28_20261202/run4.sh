#!/usr/bin/env bash
# Session 28 run 4: thresh_dq v1.46 (1eb5e82: the walk reads its rows' list entries from the warp's copy that
# thresh_list_sums leaves in shared memory) prebuilt in .prebuilt: the GPU tests, memcheck and racecheck on the
# small cases (and a D = 64 case of several rows per warp), the audit on the GPU with the bars. Then ncu per kernel
# of one warm gproj backward against v1.45 (.ab_v145: 0428c54, main before it) and v1.46b (.ab_cand-v146b: e1d1628,
# two register sets in turn at two rows per warp), D = 128 N = 4k and D = 64 N = 1k, causal and not, Gaussian,
# local and q x 4 rows.
#   (run from .ab_s28r/ in the repository root; carry .gproj_commit, .prebuilt, .ab_v145, .ab_cand-v146b, .ab_s28r)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r4"; mkdir -p "$out"
note() { echo "== $1"; }
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
timeout 150 .prebuilt/bin/cuda_tests >"$out/cuda_tests.log" 2>&1
echo "cuda_tests: rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests.log")"
run_sanitizers "$out" .prebuilt/bin/cuda_tests "$small_cases:Awkward/CudaSweep.ThreshLowRankMatchesOracleAndCpu/q200_k64_h4x1_d64*" memcheck racecheck
timeout 60 .prebuilt/bin/gproj check --suite stress --device all --quiet --json "$out/check.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check.txt" 2>&1
echo "gproj check --device all: rc=$?"
grep -E " cuda " "$out/check.txt" | grep -E "gproj" | grep -E "real" | head -4
echo "checks done at $(( $(date +%s) - t0 )) s"
(grep -E "PASSED|FAILED" "$out/cuda_tests.log" | tail -2; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$out"/sanitizer_*.log) > "$out/run4_cuda_tests_summary.txt"
cp "$out/check.txt" "$out/run4_check.txt"
B3=".ab_v145 .ab_cand-v146b .prebuilt"
BENCHES="$B3" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian local q4" ONLY="gproj" \
  NCU_ONLY="gproj" ROUNDS=0 NCU=1 OUT="$out/ncu128" timeout 150 bash scripts/device_bench_ab.sh > "$out/ncu128.log" 2>&1
echo "ncu 128 done at $(( $(date +%s) - t0 )) s"
grep -E "^==|thresh_dq" "$out"/ncu128/ab_ncu.txt | cut -c1-150
cp "$out"/ncu128/ab_ncu.txt "$out/run4_ncu128.txt"
BENCHES="$B3" SHAPES="64:1024:0 64:1024:1" INPUTS="gaussian q4 local" ONLY="gproj" \
  NCU_ONLY="gproj" ROUNDS=0 NCU=1 OUT="$out/ncu64" timeout 150 bash scripts/device_bench_ab.sh > "$out/ncu64.log" 2>&1
echo "ncu 64 done at $(( $(date +%s) - t0 )) s"
grep -E "^==|thresh_dq" "$out"/ncu64/ab_ncu.txt | cut -c1-150
cp "$out"/ncu64/ab_ncu.txt "$out/run4_ncu64.txt"
tar czf "$OUT/r4.tgz" -C "$OUT" r4
