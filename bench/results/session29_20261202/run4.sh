#!/usr/bin/env bash
# Session 29 run 4: the one-command GPU check (scripts/device_check.sh) on the prebuilt 61c28c0 (v3.36b, eig
# v1.48, v3.37: the session's kernels), then a probe for the next session: bench rows of the same kernels with the
# pre-passes in order on the caller's stream after the delta preprocess (.ab_probe: dd152dd, timing only, not
# merged) against the prebuilt, to see whether the side stream's Gram and eigenvector kernels overlap the
# preprocess at all.
#   (run from .ab_s29r/ in the repository root; carry .gproj_commit, .prebuilt, .ab_probe, .ab_s29r)
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s)
GPROJ_COMMIT=$(cat .gproj_commit) timeout 470 bash scripts/device_check.sh > "$OUT/device_check.log" 2>&1
echo "device_check: rc=$? at $(( $(date +%s) - t0 )) s"
tail -40 "$OUT/device_check.log"
export CUDA_VISIBLE_DEVICES=0
BENCHES=".ab_probe .prebuilt" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian" ONLY="gproj" ROUNDS=3 \
  OUT="$OUT/probe" timeout 90 bash scripts/device_bench_ab.sh > "$OUT/probe.log" 2>&1
echo "probe rows done at $(( $(date +%s) - t0 )) s"
grep -E "gproj" "$OUT"/probe/ab.txt | sort -k1,1 -k2,2n -k4,4 -k11,11
