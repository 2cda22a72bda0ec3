#!/usr/bin/env bash
# Session 28 run 3: thresh_dq v1.45 (0428c54: a row's entries' K rows two at a time instead of four, loaded through
# the global space) prebuilt in .prebuilt: the GPU tests, memcheck and racecheck on the small cases (and a D = 64
# case of several rows per warp), the audit on the GPU with the bars. Then ncu per kernel of one warm gproj
# backward against v1.44 (.ab_v144: 07dd0a1, main before it), v1.45b (.ab_cand-v145b: 42ddfde, four at a time
# through the global space) and main's kernels at the session's start (.ab_m41b: 676a2f7), D = 128 N = 4k and
# D = 64 N = 1k, causal and not, Gaussian, local and q x 4 rows; bench rows of the session's start and v1.45.
# Last, the source page of thresh_dq on local rows (ncu --set full, stall samples per instruction).
#   (run from .ab_s28r/ in the repository root; carry .gproj_commit, .prebuilt, .ab_m41b, .ab_v144,
#    .ab_cand-v145b, .ab_s28r)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r3"; mkdir -p "$out"
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
B4=".ab_m41b .ab_v144 .ab_cand-v145b .prebuilt"
BENCHES="$B4" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian local q4" ONLY="gproj" \
  NCU_ONLY="gproj" ROUNDS=0 NCU=1 OUT="$out/ncu128" timeout 220 bash scripts/device_bench_ab.sh > "$out/ncu128.log" 2>&1
echo "ncu 128 done at $(( $(date +%s) - t0 )) s"
grep -E "^==|thresh_dq" "$out"/ncu128/ab_ncu.txt | cut -c1-150
BENCHES="$B4" SHAPES="64:1024:0 64:1024:1" INPUTS="gaussian q4 local" ONLY="gproj" \
  NCU_ONLY="gproj" ROUNDS=0 NCU=1 OUT="$out/ncu64" timeout 220 bash scripts/device_bench_ab.sh > "$out/ncu64.log" 2>&1
echo "ncu 64 done at $(( $(date +%s) - t0 )) s"
grep -E "^==|thresh_dq" "$out"/ncu64/ab_ncu.txt | cut -c1-150
BENCHES=".ab_m41b .prebuilt" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian local" ONLY="baseline gproj" ROUNDS=2 \
  OUT="$out/rows" timeout 150 bash scripts/device_bench_ab.sh > "$out/rows.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
# Where thresh_dq's time goes on local rows (for the next session): its source page with stall samples.
mkdir -p "$out/src"
ncu_source_page "$out/src" .prebuilt/bin/cuda_attention_bench thresh_dq gproj 128:4096:0 --local
echo "source page done at $(( $(date +%s) - t0 )) s"
head -30 "$out/src/stall_top_thresh_dq_gproj.txt"
(grep -E "PASSED|FAILED" "$out/cuda_tests.log" | tail -2; grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$out"/sanitizer_*.log) > "$out/run3_cuda_tests_summary.txt"
cp "$out"/ncu128/ab_ncu.txt "$out/run3_ncu128.txt"; cp "$out"/ncu64/ab_ncu.txt "$out/run3_ncu64.txt"
cp "$out"/rows/ab.txt "$out/run3_rows.txt"; cp "$out/check.txt" "$out/run3_check.txt"
tar czf "$OUT/r3.tgz" -C "$OUT" r3
