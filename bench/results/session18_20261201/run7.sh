#!/usr/bin/env bash
# session 18, run 7: main's HEAD (.prebuilt) through scripts/device_candidate_tests.sh (its first run), then one
# round of baseline and gproj on Gaussian, q x 4 and sink inputs
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r7"; mkdir -p "$out"
bash scripts/device_candidate_tests.sh "$out/tests"
echo "tests rc=$? at $(( $(date +%s) - t0 )) s"
BENCHES=".prebuilt" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian q4 sink" ONLY="baseline gproj" ROUNDS=1 \
  OUT="$out/ab" timeout 90 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r7.tgz" -C "$OUT" r7
cat "$out/ab/ab.txt"
