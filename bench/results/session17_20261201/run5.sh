#!/usr/bin/env bash
# session 17, run 5: v3.12b + v3.11d (s17-pmax2, .prebuilt) against main (aa8a247's kernels = e948fea's), then
# its GPU tests, sanitizers and gproj check
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r5"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
BENCHES=".ab_main .prebuilt" SHAPES="128:4096:0 128:4096:1" ONLY="baseline gproj gproj-fs" ROUNDS=3 \
  OUT="$out/ab" timeout 150 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_main .prebuilt" SHAPES="128:4096:0" INPUTS="q4" ONLY="gproj" ROUNDS=2 \
  OUT="$out/ab_q4" timeout 40 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
echo "ab q4 done at $(( $(date +%s) - t0 )) s"
bin=.prebuilt/bin
summary=()
note() { summary+=("$1"); echo "== $1" | tee -a "$out/summary.txt"; }
t1=$(date +%s)
timeout 150 $bin/cuda_tests > "$out/cuda_tests.log" 2>&1
note "cuda_tests: rc=$? in $(( $(date +%s) - t1 )) s; $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | head -3 | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$out/cuda_tests.log" | head
small='Awkward/CudaSweep.*/q1_k97_h2x2_d64*:Awkward/CudaSweep.ThreshLowRankMatchesOracleAndCpu/q97_k97_h2x2_d128*:Cuda.OddRowCountKeepsTheWorkspaceAligned'
run_sanitizers "$out" "$bin/cuda_tests" "$small" memcheck racecheck synccheck
timeout 60 $bin/gproj check --suite stress --device all --quiet --fail-above gproj:dq=0.005,gproj:dk=0.005 > "$out/check.txt" 2>&1
note "gproj check --device all: rc=$?"
timeout 60 $bin/gproj check --suite stress --variants gproj --stats-from forward --device all --quiet \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 > "$out/check_fs.txt" 2>&1
note "gproj check --stats-from forward --device all: rc=$?"
echo "all done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r5.tgz" -C "$OUT" r5
grep -hE '^(baseline|gproj)' "$out"/ab/ab.txt "$out"/ab_q4/ab.txt | awk '{print $1, $2, $3, $4, $9, $6, $10, $11}' | sort | awk '{k=$1" "$4" "$5" "$8; s[k]=s[k]" "$6} END{for(k in s) print k, s[k]}' | sort
printf '%s\n' "${summary[@]}"
