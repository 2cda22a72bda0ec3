#!/usr/bin/env bash
# Session 33 run 4: why v2.7's turns were slower, tested. Reading of run 2: thread 0 of warpgroup 0 (the TMA
# producer) waits for block jb - 1's stage to be released by all eight warps before its turn, so the warpgroup
# ahead waits for the one behind every block. Builds:
#   .pb_st4 (branch s33-st4): v2.8, four K, V stages, the copy of block jb + 2 waiting for block jb - 2's release;
#   .pb_pp4 (branch s33-pp):  v2.7's turns on v2.8;
#   .pb_main: main (bbfb048).
# The forward tests of both candidates (the awkward sweep's wgmma forward, the stress suite's forwards, the
# forward-statistics and forward-basis tests), synccheck and racecheck on the forward's q97 cases (named barriers),
# then forward and backward rows of baseline and gproj-fb, the three builds in turn, two rounds.
#   (run from the repository root; carry .deps (the runtime debs of .prebuilt), .pb_main (main's cuda_attention_bench),
#   .pb_st4, .pb_pp4: cuda_tests and cuda_attention_bench)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r4"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
fwd_tests='*WgmmaForward*:Cuda.StressSuiteForwards*:Cuda.Forward*'
for x in st4 pp4; do
  mkdir -p /tmp/$x && tar xJf .pb_$x/pack.tar.xz -C /tmp/$x
  timeout 90 /tmp/$x/bin/cuda_tests --gtest_filter="$fwd_tests" >"$out/cuda_tests_$x.log" 2>&1
  echo "forward tests $x ($(cat .pb_$x/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_$x.log") at $(( $(date +%s) - t0 )) s"
done
mkdir -p "$out/san"
run_sanitizers "$out/san" /tmp/pp4/bin/cuda_tests '*WgmmaForward*q97*' synccheck racecheck
BENCHES=".pb_main .pb_st4 .pb_pp4" SHAPES="128:4096:0 128:4096:1 128:8192:0 64:4096:0" INPUTS="gaussian" \
  ONLY="baseline gproj-fb" ROUNDS=2 OUT="$out/rows" timeout 200 bash scripts/device_bench_ab.sh > "$out/rows.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
grep -vE '^#' "$out"/rows/ab.txt | sort -k2,2n -k3,3n -k4,4 -k1,1 -k11,11 | awk '{print $1,$2,$3,$4,$5,$6,$10,$11}'
tar czf "$OUT/r4.tgz" -C "$OUT" r4 && rm -rf "$out"
