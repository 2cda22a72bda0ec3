#!/usr/bin/env bash
# session 18, run 5: s18-dqsw (v3.19: the dQacc tile swizzle without bank conflicts; .prebuilt) GPU tests,
# sanitizers and gproj check, then the A/B against main (92b9351) at D = 128 and D = 64, three rounds, ncu
# per-kernel times, and the source pages of the forward kernel (baseline, gproj) and thresh_dq (gproj) of main
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r5"; mkdir -p "$out/pages"
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
BENCHES=".ab_main .prebuilt" SHAPES="128:4096:0 128:4096:1 64:1024:0 64:1024:1" ONLY="baseline gproj gproj-fs" ROUNDS=3 \
  OUT="$out/ab" timeout 200 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_main .prebuilt" SHAPES="128:4096:0" ONLY="gproj" ROUNDS=0 NCU=1 NCU_ONLY="baseline gproj" \
  OUT="$out/ncu" timeout 120 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
bench=/tmp/ab_bench/$(cat .ab_main/COMMIT)/cuda_attention_bench
for label in baseline gproj; do
  ncu_source_page "$out/pages" "$bench" flash_fwd_wg_kernel "$label" 128:4096:0
done
ncu_source_page "$out/pages" "$bench" thresh_dq_kernel gproj 128:4096:0
echo "pages done at $(( $(date +%s) - t0 )) s"
xz -9 "$out"/pages/sass_*.csv
tar czf "$OUT/r5.tgz" -C "$OUT" r5
grep -hE '^(baseline|gproj)' "$out"/ab/ab.txt | awk '{print $1, $2, $3, $4, $9, $6, $10, $11}' | sort | awk '{k=$1" "$3" "$4" "$5" "$8; s[k]=s[k]" "$6} END{for(k in s) print k, s[k]}' | sort
cat "$out"/ncu/ab_ncu.txt 2>/dev/null | head -40
printf '%s\n' "${summary[@]}"
