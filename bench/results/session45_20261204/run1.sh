#!/usr/bin/env bash
# Session 45, run 1 (device tool; carry [".gproj_commit", ".prebuilt", ".ab_587ef53", ".ab_83fcc5f"]: .prebuilt from
# scripts/device_prebuild.sh at the commit README.md lists, the .ab_* from `bash scripts/pack_bench.sh 587ef53
# 83fcc5f`): the whole C++ GPU test suite at v3.52 (every wgmma backward form reads LSE and delta differently now),
# then the backward of baseline and fp16-lowrank at the speed bar's shapes for three builds side by side (session
# 44's main; + r_i by bulk reduce-add, v3.2-h16b; + the deferred LSE arithmetic, v3.52), and ncu's SASS counters of
# both main kernels at v3.52 (N = 4k).
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "run1: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
bin=.prebuilt/bin
t0=$SECONDS
timeout 300 "$bin/cuda_tests" >"$out/cuda_tests.log" 2>&1
echo "== cuda_tests: rc=$? ($((SECONDS - t0)) s); $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \]|Failure|Expected|Which is|actual" "$out/cuda_tests.log" | head -20
t0=$SECONDS
BENCHES=".ab_587ef53 .ab_83fcc5f .prebuilt" SHAPES="128:4096:0 128:4096:1 128:8192:0 128:8192:1 128:16384:0 128:16384:1" \
  ONLY="baseline gproj-h16" ROUNDS=2 OUT="$out" bash scripts/device_bench_ab.sh >"$out/ab.log" 2>&1
echo "== bench A/B: rc=$? ($((SECONDS - t0)) s)"
t0=$SECONDS
for label in baseline gproj-h16; do
  timeout 150 ncu -k regex:flash_bwd_wg_kernel --launch-skip 1 --launch-count 1 --section SourceCounters \
    --section WarpStateStats --import-source no -o "$out/src_$label" "$bin/cuda_attention_bench" --only "$label" \
    --shape 128:4096:0 --reps 1 >"$out/src_$label.log" 2>&1
  echo "== ncu source $label: rc=$?"
  timeout 60 ncu -i "$out/src_$label.ncu-rep" --page source --csv --print-source sass >"$out/src_$label.csv" 2>&1
  rm -f "$out/src_$label.ncu-rep"
done
echo "== ncu: $((SECONDS - t0)) s"
AB_VARIANT=gproj-h16 ab_overhead "$out/ab.txt"  # (the run printed it through bench/ab_overhead.py, since removed: scripts/device_env.sh had it)
