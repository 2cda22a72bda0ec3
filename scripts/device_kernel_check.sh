#!/usr/bin/env bash
# A short device command for one kernel change (about a minute with .prebuilt): the GPU tests matching
# TEST_FILTER, compute-sanitizer memcheck, racecheck and synccheck on SMALL_FILTER, and cuda_attention_bench for
# BENCH_LABELS (space-separated; all configurations when empty). The whole scripts/device_check.sh stays the
# check before a kernel becomes a default. Device tool:
#   GPROJ_COMMIT=<commit> TEST_FILTER='*Wgmma*' SMALL_FILTER='Awkward/CudaSweep.WgmmaBackward*/q97_k97_h2x2_d128*' \
#     BENCH_LABELS='baseline base-v31' bash scripts/device_kernel_check.sh
# with carry [".gproj_commit", ".prebuilt"] and .prebuilt from scripts/device_prebuild.sh at that commit.
# ALT_PREBUILT="<dir> ..." (carried too) also runs TEST_FILTER with each folder's cuda_tests (its pack.tar.xz and
# COMMIT: earlier commits' binaries from scripts/device_prebuild_alt.sh), to tell which commits a failure came with.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}" OMP_WAIT_POLICY=passive
source scripts/device_env.sh
if [ -z "$prebuilt" ]; then
  echo "device_kernel_check: .prebuilt is not for $GPROJ_COMMIT (run scripts/device_prebuild.sh at that commit)" >&2
  exit 2
fi
summary=()
note() { summary+=("$1"); echo "== $1"; }
bin=.prebuilt/bin
{ echo "gproj commit: $GPROJ_COMMIT"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$out/env.txt"

t0=$(date +%s)
timeout 240 "$bin/cuda_tests" --gtest_filter="${TEST_FILTER:-*}" >"$out/cuda_tests.log" 2>&1
note "cuda_tests ${TEST_FILTER:-*}: rc=$? in $(( $(date +%s) - t0 )) s; $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | head -3 | tr '\n' ' ')"
grep -E "^\[  FAILED  \]|Failure|error" "$out/cuda_tests.log" | head -20
for alt in ${ALT_PREBUILT:-}; do
  alt_commit=$(cat "$alt/COMMIT" 2>/dev/null || echo unknown)
  [ -x "$alt/bin/cuda_tests" ] || tar xJf "$alt/pack.tar.xz" -C "$alt"
  t0=$(date +%s)
  timeout 240 "$alt/bin/cuda_tests" --gtest_filter="${TEST_FILTER:-*}" >"$out/cuda_tests_$alt_commit.log" 2>&1
  note "cuda_tests ${TEST_FILTER:-*} at $alt_commit: rc=$? in $(( $(date +%s) - t0 )) s; $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests_$alt_commit.log" | head -3 | tr '\n' ' ')"
  grep -E "^\[  FAILED  \]" "$out/cuda_tests_$alt_commit.log" | head -20
done

[ -z "${SMALL_FILTER:-}" ] || run_sanitizers "$out" "$bin/cuda_tests" "$SMALL_FILTER" memcheck racecheck synccheck

t0=$(date +%s)
if [ -z "${BENCH_LABELS:-}" ]; then
  timeout 120 "$bin/cuda_attention_bench" >"$out/cuda_bench.txt" 2>&1
else
  for l in $BENCH_LABELS; do timeout 60 "$bin/cuda_attention_bench" --only "$l"; done >"$out/cuda_bench.txt" 2>&1
fi
note "cuda_attention_bench ${BENCH_LABELS:-(all)}: rc=$? in $(( $(date +%s) - t0 )) s"
cat "$out/cuda_bench.txt"
echo
printf '%s\n' "${summary[@]}"
