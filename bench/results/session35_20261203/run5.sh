#!/usr/bin/env bash
# Session 35 run 5 (H200), with the last minutes of the session's device time: the backward v3.1 (each warpgroup
# adds its own dQ, no meeting of the two warpgroups; dQ by atomics at D = 128) against v3.2 (the default at
# D = 128: both warpgroups meet before a column-split dQ, sent by bulk reduce-add), today's kernels (a1d60cf's
# bench, .pb_m35), D = 128, N = 4k, two rounds. A first look at run 4's question; not a candidate.
#   (run from the repository root; carry .deps holding only the runtime debs and .pb_m35)
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
mkdir -p /tmp/m35 && tar xJf .pb_m35/bench.tar.xz -C /tmp/m35
for r in 1 2; do
  for v in baseline base-v31 gproj gproj-v31; do
    echo "$(timeout 30 /tmp/m35/cuda_attention_bench --only $v --shape 128:4096:0 --reps 5 2>&1 | grep -vE '^(variant|#)')  r$r"
  done
done
