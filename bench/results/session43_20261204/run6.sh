#!/usr/bin/env bash
# Session 43, run 6 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at c755c7f):
# the whole GPU suite (every kernel, after the KernelParams and launch changes), the backward of baseline, gproj and
# gproj-h16 at the speed bar's shapes (D = 128, N = 4k, 8k, 16k, causal and not), and ncu's instruction count and
# time of v3.2-h16's main kernel.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "run6: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
bin=.prebuilt/bin
timeout 200 "$bin/cuda_tests" >"$out/cuda_tests.log" 2>&1
echo "== cuda_tests: rc=$?; $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \]" "$out/cuda_tests.log" | head
for shape in 128:4096:0 128:4096:1 128:8192:0 128:8192:1 128:16384:0 128:16384:1; do
  for label in baseline gproj gproj-h16; do
    timeout 60 "$bin/cuda_attention_bench" --only "$label" --shape "$shape" --reps 10 | grep -vE '^(variant|#)'
  done
done | tee "$out/bench.txt"
timeout 150 ncu -k regex:flash_bwd_wg_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section InstructionStats "$bin/cuda_attention_bench" --only gproj-h16 --shape 128:4096:0 \
  --reps 1 >"$out/ncu_bwd_gproj-h16.txt" 2>&1
echo "== ncu main kernel gproj-h16: rc=$?"
grep -E "Duration|Executed Instructions |No Eligible|Warp Cycles Per Issued" "$out/ncu_bwd_gproj-h16.txt" | head
