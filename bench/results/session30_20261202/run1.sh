#!/usr/bin/env bash
# Session 30 run 1: where the pre-passes' time goes (ncu --set full source pages of gram_kernel and eig_kernel,
# D = 128 N = 4k Gaussian, non-causal), thresh_dq's on local rows and the dK-only postprocess's; per-kernel ncu
# times of one warm gproj backward; bench rows of baseline and gproj at the session's start (.ab_s30-start).
#   (run from .ab_s30r/ in the repository root; carry .prebuilt (debs only), .ab_s30-start, .ab_s30r)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r1"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
ncu --version | tail -1 >> "$out/env.txt"
mkdir -p /tmp/b && tar xJf .ab_s30-start/bench.tar.xz -C /tmp/b
B=/tmp/b/cuda_attention_bench
ncu_source_page "$out" $B eig_kernel gproj 128:4096:0
ncu_source_page "$out" $B gram_kernel gproj 128:4096:0
ncu_source_page "$out" $B thresh_dq gproj 128:4096:0 --local
ncu_source_page "$out" $B dk_suffix gproj 128:4096:0
echo "source pages done at $(( $(date +%s) - t0 )) s"
for f in "$out"/stall_top_*; do echo "=== $f"; head -30 "$f"; done
grep -hE "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy" "$out"/details_*.txt | head -40
BENCHES=".ab_s30-start" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian" ONLY="baseline gproj" NCU_ONLY="baseline gproj" \
  ROUNDS=2 NCU=1 OUT="$out/rows" timeout 200 bash scripts/device_bench_ab.sh > "$out/rows.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
cut -c1-120 "$out"/rows/ab_ncu.txt | head -50
grep -E "gproj|baseline" "$out"/rows/ab.txt | sort -k1,1 -k2,2n -k4,4 | head -20
