#!/usr/bin/env bash
# A candidate build's GPU checks in one call, for a device run script (bench/results/sessionN_*/runM.sh): the
# C++ GPU suite, compute-sanitizer memcheck, racecheck and synccheck on the small cases, and `gproj check` on the
# stress suite (CPU and CUDA) with gproj's dQ / dK bound of 0.5%, with the statistics from the backward and from
# the forward. Runs the binaries of .prebuilt (scripts/device_prebuild.sh), whose COMMIT must equal GPROJ_COMMIT
# (.gproj_commit): a build of another commit is refused rather than tested under the wrong name.
#   bash scripts/device_candidate_tests.sh DIR
# Logs and summary.txt (one line per check, as the run scripts of session 17-18 wrote them) go to DIR. Exit
# status: 0 when every check passed, 1 when one failed, 2 for a usage or setup error. (scripts/device_kernel_check.sh
# is the shorter form for one kernel change: a test filter, no `gproj check`, a bench, no pass / fail status.)
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
# compute-sanitizer's cases: device_env.sh's small cases and the forward's q97 ones.
small="$small_cases:*WgmmaForward*q97*"
failed=0
note() { echo "== $1" | tee -a "$out/summary.txt"; }
t0=$(date +%s)
timeout 150 "$bin/cuda_tests" >"$out/cuda_tests.log" 2>&1
rc=$?
[ $rc -eq 0 ] || failed=1
totals=$(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | head -3 | tr '\n' ' ')
note "cuda_tests: rc=$rc in $(( $(date +%s) - t0 )) s; $totals"
run_sanitizers "$out" "$bin/cuda_tests" "$small" memcheck racecheck synccheck || failed=1
bounds=gproj:dq=0.005,gproj:dk=0.005
timeout 60 "$bin/gproj" check --suite stress --device all --quiet --fail-above "$bounds" >"$out/check.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || failed=1
note "gproj check --device all: rc=$rc"
timeout 60 "$bin/gproj" check --suite stress --variants gproj --projection thresh-lowrank --stats-from forward \
  --device all --quiet \
  --fail-above "$bounds" >"$out/check_fs.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || failed=1
note "gproj check --stats-from forward --device all: rc=$rc"
exit $failed
