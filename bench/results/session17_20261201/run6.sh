#!/usr/bin/env bash
# session 17, run 6: v3.12c (s17-pmax3) against main (8d2d508's kernels), three rounds, Gaussian and q x 4
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16
t0=$(date +%s)
out="$OUT/r6"; mkdir -p "$out"
BENCHES=".ab_main .ab_s17-pmax3" SHAPES="128:4096:0 128:4096:1" ONLY="baseline gproj gproj-fs" ROUNDS=3 \
  OUT="$out/ab" timeout 120 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_main .ab_s17-pmax3" SHAPES="128:4096:0" INPUTS="q4" ONLY="gproj" ROUNDS=3 \
  OUT="$out/ab_q4" timeout 40 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
echo "ab q4 done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r6.tgz" -C "$OUT" r6
grep -hE '^(baseline|gproj)' "$out"/ab/ab.txt "$out"/ab_q4/ab.txt | awk '{print $1, $2, $3, $4, $9, $6, $10, $11}' | sort | awk '{k=$1" "$4" "$5" "$8; s[k]=s[k]" "$6} END{for(k in s) print k, s[k]}' | sort
