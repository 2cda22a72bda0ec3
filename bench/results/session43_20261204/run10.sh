#!/usr/bin/env bash
# Session 43, run 10 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at c6fb116):
# ncu's speed of light, memory, occupancy and warp states of fp16-lowrank's dQ post-pass and of baseline's, at D = 128,
# N = 4k (why the post-pass takes twice its bytes' time).
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "run10: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
bin=.prebuilt/bin
for kl in h16_dq_kernel:gproj-h16 bwd_postprocess_dq_kernel:baseline; do
  k=${kl%%:*} label=${kl##*:}
  timeout 120 ncu -k "regex:$k" --launch-skip 1 --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis "$bin/cuda_attention_bench" \
    --only "$label" --shape 128:4096:0 --reps 1 >"$out/ncu_$k.txt" 2>&1
  echo "== ncu $k: rc=$?"
  grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit|L1/TEX Hit|Achieved Occupancy|Registers Per|Theoretical Occ|Stall|Warp Cycles Per Issued|Mem Busy|Max Bandwidth|Block Limit|Waves" \
    "$out/ncu_$k.txt" | head -30
done
