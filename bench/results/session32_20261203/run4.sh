#!/usr/bin/env bash
# Session 32 run 4: run 3 found the SM clock the same (~1805 MHz over every CTA) and the slow CTAs spending ~2.8%
# more cycles, so the cause is not the clock. A guess: the L1 / shared-memory carveout. The delta preprocess (33 KB
# of static shared memory a CTA) likely runs in the 228 KB configuration, which gproj's main kernel (220 KB) needs
# too, so nothing is reconfigured between them; a kernel with no shared memory (the spin kernel) or a small one
# (eig) in between makes the SMs reconfigure before the main kernel. Probe build .pb_carve (branch probe/gap):
# GPROJ_PROBE_PRE_CARVEOUT sets the preprocess's preferred carveout; GPROJ_PROBE_GAP="1:0:C" the spin kernel's.
# Predicted if the guess holds: gproj-fb fast with the preprocess at 50 or 75 % and with the spin kernel at 0 %,
# slow again with the spin kernel at 100 %.
#   (run from the repository root; carry .prebuilt (debs), .pb_carve)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r4"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/c && tar xJf .pb_carve/pack.tar.xz -C /tmp/c
B=/tmp/c/bin/cuda_attention_bench
row() {  # row VARIANT SHAPE GAP PRE_CARVEOUT
  unset GPROJ_PROBE_GAP GPROJ_PROBE_PRE_CARVEOUT
  [ "$3" = - ] || export GPROJ_PROBE_GAP=$3
  [ "$4" = - ] || export GPROJ_PROBE_PRE_CARVEOUT=$4
  echo "gap=$3 pre=$4 $(timeout 60 $B --only "$1" --shape "$2" --reps 5 2>/dev/null | grep -vE '^(variant|#)')"
  unset GPROJ_PROBE_GAP GPROJ_PROBE_PRE_CARVEOUT
}
for r in 1 2; do
  for shape in 128:8192:0 128:4096:0; do
    for cfg in "gproj-fb - -" "gproj-fb 1:0 -" "gproj-fb 1:0:0 -" "gproj-fb 1:0:100 -" "gproj-fb - 50" "gproj-fb - 75" \
               "gproj-fb - 100" "gproj - -" "gproj - 75" "baseline - -" "baseline - 75" "baseline 1:0:0 -" \
               "baseline 1:0:100 -"; do
      set -- $cfg
      row "$1" "$shape" "$2" "$3"
    done
  done
done | tee "$out/rows.txt"
echo "done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r4.tgz" -C "$OUT" r4 && rm -rf "$out"
