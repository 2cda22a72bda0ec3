#!/usr/bin/env bash
# Session 31 run 2: why gproj-fb's backward (no basis pre-passes before the main kernel) was slower than gproj's in
# run 1. A probe build (.pb_gap, branch probe/gap 447066e: aeaf906 + GPROJ_PROBE_GAP, a do-nothing spin kernel of
# `ctas` CTAs for `us` µs right before the main kernel). Rows of baseline, gproj, gproj-fb without a gap, with a
# 1-CTA 30 µs gap and with a 132-CTA 30 µs gap (the gap's own 30 µs is in the backward's time); then ncu's
# per-kernel times of gproj and gproj-fb at D = 128, N = 8k (where run 1's difference was largest).
#   (run from the repository root; carry .prebuilt (debs), .pb_gap, .ab_s31)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r2"; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
for gap in none 1:30 132:30; do
  if [ "$gap" = none ]; then unset GPROJ_PROBE_GAP; else export GPROJ_PROBE_GAP=$gap; fi
  BENCHES=".pb_gap" SHAPES="128:8192:0 128:4096:0" INPUTS="gaussian" ONLY="baseline gproj gproj-fb" ROUNDS=2 \
    OUT="$out/rows_${gap/:/x}" timeout 150 bash scripts/device_bench_ab.sh > "$out/rows_${gap/:/x}.log" 2>&1
  echo "== gap $gap (done at $(( $(date +%s) - t0 )) s)"
  grep -E "gproj|baseline" "$out/rows_${gap/:/x}/ab.txt" | sort -k2,2n -k1,1 | cut -c1-60
done
unset GPROJ_PROBE_GAP
BENCHES=".pb_gap" SHAPES="128:8192:0" INPUTS="gaussian" ONLY="gproj" NCU_ONLY="gproj gproj-fb" ROUNDS=0 NCU=1 \
  OUT="$out/ncu" timeout 150 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
grep -vE "^#" "$out"/ncu/ab_ncu.txt | cut -c1-110 | head -40
echo "ncu done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r2.tgz" -C "$OUT" r2 && rm -rf "$out"
