#!/usr/bin/env bash
# Session 32 run 5: v3.40 candidates. Run 4 confirmed the carveout reading (perf-notes). Two builds, both with the
# preprocess moved to a smaller carveout where gproj's main kernel needs the 228 KB configuration (D = 128):
#   .pb_s32a (branch s32-fb): main's in-order pre-passes, plus K's basis from the forward back (v3.39, opt-in,
#            bench row gproj-fb);
#   .pb_s32b (branch s32-side): the pre-passes back on side streams beside the memsets and the preprocess (v3.37's
#            launch order), which sessions 16-17 and 29 found ~36 µs slower than in order, perhaps for this reason.
# The GPU tests of both, memcheck of the side-stream build's small cases, the audit with the bars (side-stream
# build), and rows of baseline, gproj and gproj-fb side by side, three rounds.
#   (run from the repository root; carry .prebuilt (debs), .pb_s32a, .pb_s32b)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r5"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
for x in a b; do
  mkdir -p /tmp/$x && tar xJf .pb_s32$x/pack.tar.xz -C /tmp/$x
  timeout 150 /tmp/$x/bin/cuda_tests >"$out/cuda_tests_$x.log" 2>&1
  echo "cuda_tests $x ($(cat .pb_s32$x/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_$x.log") at $(( $(date +%s) - t0 )) s"
done
run_sanitizers "$out" /tmp/b/bin/cuda_tests "$small_cases" memcheck
timeout 90 /tmp/b/bin/gproj check --suite stress --device all --quiet --json "$out/check_b.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_b.txt" 2>&1
echo "gproj check --device all (b): rc=$? at $(( $(date +%s) - t0 )) s"
grep -E " cuda " "$out/check_b.txt" | grep -E "gproj" | grep -E "real|sharp-rows-d128" | head -6
BENCHES=".pb_s32a .pb_s32b" SHAPES="128:4096:0 128:4096:1 128:8192:0 128:8192:1 64:4096:0" INPUTS="gaussian" \
  ONLY="baseline gproj gproj-fb" ROUNDS=3 OUT="$out/rows" timeout 330 bash scripts/device_bench_ab.sh > "$out/rows.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
grep -E "gproj|baseline" "$out"/rows/ab.txt | sort -k2,2n -k3,3n -k4,4 -k1,1 | awk '{print $1,$2,$3,$4,$6,$10}' | head -80
tar czf "$OUT/r5.tgz" -C "$OUT" r5 && rm -rf "$out"
