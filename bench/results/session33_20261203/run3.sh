#!/usr/bin/env bash
# Session 33 run 3: where the forward-statistics form stands now. gproj-fs (FlashParams::forward_stats: P (K U) and
# s_i ride on the forward's P V, the backward forms only r_i) was last timed in session 21, before v3.34-v3.40 and
# the basis from the forward. Rows of baseline, gproj-fb (the PyTorch op's path) and gproj-fs on main (bbfb048,
# .prebuilt), forward and backward; Gaussian at the four D = 128 shapes, q x 4 and sink rows at N = 4k; two rounds.
#   (run from the repository root; carry .prebuilt)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r3"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
BENCHES=".prebuilt" SHAPES="128:4096:0 128:4096:1 128:8192:0 128:8192:1" INPUTS="gaussian" \
  ONLY="baseline gproj-fb gproj-fs" ROUNDS=2 OUT="$out/g" timeout 200 bash scripts/device_bench_ab.sh > "$out/g.log" 2>&1
BENCHES=".prebuilt" SHAPES="128:4096:0" INPUTS="q4 sink" \
  ONLY="baseline gproj-fb gproj-fs" ROUNDS=2 OUT="$out/s" timeout 120 bash scripts/device_bench_ab.sh > "$out/s.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
cat "$out"/g/ab.txt "$out"/s/ab.txt | grep -vE '^#' | sort -k2,2n -k3,3n -k4,4 -k9,9 -k1,1 | awk '{print $1,$2,$3,$4,$5,$6,$9,$10}'
tar czf "$OUT/r3.tgz" -C "$OUT" r3 && rm -rf "$out"
