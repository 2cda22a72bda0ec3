#!/usr/bin/env bash
# session 18, run 1: s18-all (v3.18 statistics warpgroup + v1.40 + v3.11d; .prebuilt) GPU tests, sanitizers and
# gproj check first (v3.18 has never run: a hang shows as a timeout), then the A/B against main (92b9351) and
# s18-small (v1.40 + v3.11d only), three rounds, and ncu per-kernel times of gproj, gproj-fs
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r1"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
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
echo "tests done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_main .prebuilt .ab_s18-small" SHAPES="128:4096:0 128:4096:1" ONLY="baseline gproj gproj-fs" ROUNDS=3 \
  OUT="$out/ab" timeout 200 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_main .prebuilt" SHAPES="128:4096:0 128:4096:1" ONLY="gproj" ROUNDS=0 NCU=1 NCU_ONLY="gproj gproj-fs" \
  OUT="$out/ncu" timeout 120 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r1.tgz" -C "$OUT" r1
grep -hE '^(baseline|gproj)' "$out"/ab/ab.txt | awk '{print $1, $2, $3, $4, $9, $6, $10, $11}' | sort | awk '{k=$1" "$4" "$5" "$8; s[k]=s[k]" "$6} END{for(k in s) print k, s[k]}' | sort
cat "$out"/ncu/ab_ncu.txt 2>/dev/null | head -60
printf '%s\n' "${summary[@]}"
