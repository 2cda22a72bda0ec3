#!/usr/bin/env bash
# session 18, run 3: ncu's unit limits (bench/ncu_limits.py: issue, pipes, shared memory, L2, atomics, stalls) of the
# backward main kernel, main (92b9351) against s18-scan (v3.18b), baseline and gproj, D = 128, N = 4k, non-causal
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16
t0=$(date +%s)
out="$OUT/r3"; mkdir -p "$out"
BENCHES=".ab_main .ab_s18-scan" SHAPES="128:4096:0" ONLY="baseline gproj" ROUNDS=0 NCU_LIMITS=1 NCU_ONLY="baseline gproj" \
  OUT="$out/lim" timeout 400 bash scripts/device_bench_ab.sh > "$out/lim.log" 2>&1
echo "limits done at $(( $(date +%s) - t0 )) s"
rm -rf "$out"/lim/limits
tar czf "$OUT/r3.tgz" -C "$OUT" r3
cat "$out"/lim/ab_limits.txt
