#!/usr/bin/env bash
# Session 27 run 3. (a) Why v1.40 (fc2778a, .prebuilt) made thresh_dq slower than main (.ab_s27m, 23a729c) on
# every input: ncu's launch statistics, occupancy, instruction count and warp states of thresh_dq, both builds,
# D = 128, N = 4k, Gaussian and q x 4 rows. (b) The new `local` input (0e4dde3, .ab_s27l: queries built from nearby
# keys, trained-like rows whose keys repeat locally as in the captured states): ncu per kernel of one warm gproj
# backward, and bench rows of baseline and gproj, against Gaussian and q x 4 rows of the same build.
#   (run from .ab_s27r/ in the repository root; carry .gproj_commit, .prebuilt, .ab_s27m, .ab_s27l, .ab_s27r)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r3"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/m && tar xJf .ab_s27m/bench.tar.xz -C /tmp/m
tar xJf .prebuilt/pack.tar.xz -C .prebuilt bin/cuda_attention_bench 2>/dev/null
for kind in gaussian q4; do
  args=$(input_args "$kind")
  for b in /tmp/m/cuda_attention_bench .prebuilt/bin/cuda_attention_bench; do
    tag=$([ "$b" = /tmp/m/cuda_attention_bench ] && echo main || echo v140)
    # shellcheck disable=SC2086
    timeout 120 ncu --cache-control none --clock-control none -k regex:thresh_dq --launch-skip 1 --launch-count 1 \
      --section LaunchStats --section Occupancy --section WarpStateStats --section SpeedOfLight \
      --metrics smsp__inst_executed.sum "$b" --only gproj --shape 128:4096:0 $args --reps 1 \
      > "$out/ncu_${tag}_$kind.txt" 2>&1
    echo "== $tag $kind rc=$?"
    grep -E "^ +(Duration|Registers Per Thread|Dynamic Shared Memory Per Block|Static Shared Memory Per Block|Shared Memory Configuration Size|Block Limit (Registers|Shared Mem)|Theoretical Occupancy|Achieved Occupancy|Warp Cycles Per Issued Instruction|smsp__inst_executed.sum)" \
      "$out/ncu_${tag}_$kind.txt" | sed 's/  */ /g'
  done
done > "$out/diag.txt"
cat "$out/diag.txt"
echo "diag done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_s27l" SHAPES="128:4096:0 128:4096:1 64:1024:1" INPUTS="local q4 gaussian" ONLY="gproj" NCU_ONLY="gproj" \
  ROUNDS=0 NCU=1 OUT="$out/ncu" timeout 200 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
grep -E "^==|flash_bwd|thresh|postprocess|total" "$out"/ncu/ab_ncu.txt | cut -c1-150
BENCHES=".ab_s27l" SHAPES="128:4096:0 128:4096:1" INPUTS="local q4 gaussian" ONLY="baseline gproj" \
  ROUNDS=2 OUT="$out/ab" timeout 200 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt
tar czf "$OUT/r3.tgz" -C "$OUT" r3
