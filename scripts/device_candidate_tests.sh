#!/usr/bin/env bash
# A candidate build's GPU checks in one call, for a device run script (bench/results/sessionN_*/runM.sh): the
# C++ GPU suite, compute-sanitizer memcheck, racecheck and synccheck on the small cases, and `gproj check` on the
# stress suite (CPU and CUDA) with gproj's dQ / dK bound of 0.5%, with the statistics from the backward and from
# the forward. Runs the binaries of .prebuilt (scripts/device_prebuild.sh), whose COMMIT must equal GPROJ_COMMIT
# (.gproj_commit): a build of another commit is refused rather than tested under the wrong name.
#   bash scripts/device_candidate_tests.sh DIR
# Logs and summary.txt (one line per check, as the run scripts of session 17-18 wrote them) go to DIR. Exit
# status: 0 when every check passed, 1 when one failed, 2 for a usage or setup error.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
[ $# -eq 1 ] || { echo "usage: $0 DIR (the folder for the logs and summary.txt)" >&2; exit 2; }
out=$1
mkdir -p "$out" || exit 2
source scripts/device_env.sh
if [ -z "$prebuilt" ]; then
  echo "device_candidate_tests: .prebuilt/COMMIT ($(cat .prebuilt/COMMIT 2>/dev/null || echo missing)) is not" \
       "GPROJ_COMMIT ($GPROJ_COMMIT): run scripts/device_prebuild.sh for this commit and carry .prebuilt and" \
       ".gproj_commit" >&2
  exit 2
fi
bin=.prebuilt/bin
# The cases small enough for compute-sanitizer: every sweep test at q1_k97 D = 64, thresh-lowrank at D = 128 with
# q97_k97, the workspace alignment test and the forward's q97 cases.
small='Awkward/CudaSweep.*/q1_k97_h2x2_d64*:Awkward/CudaSweep.ThreshLowRankMatchesOracleAndCpu/q97_k97_h2x2_d128*:'
small+='Cuda.OddRowCountKeepsTheWorkspaceAligned:*WgmmaForward*q97*'
failed=0
note() { echo "== $1" | tee -a "$out/summary.txt"; }
t0=$(date +%s)
timeout 150 "$bin/cuda_tests" >"$out/cuda_tests.log" 2>&1
rc=$?
[ $rc -eq 0 ] || failed=1
totals=$(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | head -3 | tr '\n' ' ')
note "cuda_tests: rc=$rc in $(( $(date +%s) - t0 )) s; $totals"
for tool in memcheck racecheck synccheck; do
  t0=$(date +%s)
  timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/cuda_tests" --gtest_filter="$small" \
    >"$out/sanitizer_$tool.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || failed=1
  totals=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer_$tool.log" | tail -1)
  note "compute-sanitizer $tool: rc=$rc in $(( $(date +%s) - t0 )) s; $totals"
done
bounds=gproj:dq=0.005,gproj:dk=0.005
timeout 60 "$bin/gproj" check --suite stress --device all --quiet --fail-above "$bounds" >"$out/check.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || failed=1
note "gproj check --device all: rc=$rc"
timeout 60 "$bin/gproj" check --suite stress --variants gproj --stats-from forward --device all --quiet \
  --fail-above "$bounds" >"$out/check_fs.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || failed=1
note "gproj check --stats-from forward --device all: rc=$rc"
exit $failed
