#!/usr/bin/env bash
# session 18, run 6: s18-fwdmask (forward v2.4 on main's v3.19; .prebuilt) GPU tests, sanitizers and gproj
# check, the A/B against main's kernels (s18-dqsw, c2a2321) at D = 128 and D = 64, three rounds, the forward's
# source page (baseline) on v2.4, then device_check.sh's Python part (pytest with CUDA, the side by side with SDPA)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r6"; mkdir -p "$out/pages"
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
small='Awkward/CudaSweep.*/q1_k97_h2x2_d64*:Awkward/CudaSweep.ThreshLowRankMatchesOracleAndCpu/q97_k97_h2x2_d128*:Cuda.OddRowCountKeepsTheWorkspaceAligned:*WgmmaForward*q97*'
run_sanitizers "$out" "$bin/cuda_tests" "$small" memcheck racecheck synccheck
timeout 60 $bin/gproj check --suite stress --device all --quiet --fail-above gproj:dq=0.005,gproj:dk=0.005 > "$out/check.txt" 2>&1
note "gproj check --device all: rc=$?"
timeout 60 $bin/gproj check --suite stress --variants gproj --stats-from forward --device all --quiet \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 > "$out/check_fs.txt" 2>&1
note "gproj check --stats-from forward --device all: rc=$?"
echo "tests done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_s18-dqsw .prebuilt" SHAPES="128:4096:0 128:4096:1 64:1024:0 64:1024:1" ONLY="baseline gproj" ROUNDS=3 \
  OUT="$out/ab" timeout 150 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
bench=/tmp/ab_bench/$(cat .prebuilt/COMMIT)/cuda_attention_bench
ncu_source_page "$out/pages" "$bench" flash_fwd_wg_kernel baseline 128:4096:0
xz -9 "$out"/pages/sass_*.csv
echo "page done at $(( $(date +%s) - t0 )) s"
ONLY_PYTHON=1 OUT="$out/check" timeout 300 bash scripts/device_check.sh > "$out/check.log" 2>&1
echo "python check done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r6.tgz" -C "$OUT" r6
grep -hE '^(baseline|gproj)' "$out"/ab/ab.txt | awk '{print $1, $2, $3, $4, $9, $5, $6, $10, $11}' | sort | awk '{k=$1" "$3" "$4" "$5" "$9; f[k]=f[k]" "$6; s[k]=s[k]" "$7} END{for(k in s) print k, "fwd", f[k], "bwd", s[k]}' | sort
tail -30 "$out/check.log"
printf '%s\n' "${summary[@]}"
