#!/usr/bin/env bash
# Session 22: ncu source pages (stall samples per SASS instruction) of gproj's backward main kernel for each pack in
# $PACKS, Gaussian rows, D = 128, N = 4k, non-causal. Outputs in $OUT/p.tgz.
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
out="$OUT/p"; mkdir -p "$out"
source scripts/device_env.sh
for d in $PACKS; do
  c=$(cat "$d/COMMIT") x="/tmp/pb/$c"; mkdir -p "$x"; tar xJf "$d/bench.tar.xz" -C "$x"
  mkdir -p "$out/$c"
  ncu_source_page "$out/$c" "$x/cuda_attention_bench" flash_bwd_wg gproj 128:4096:0 2>&1 | tail -2
  head -30 "$out/$c/stall_top_flash_bwd_wg_gproj.txt"
done
tar czf "$OUT/p.tgz" -C "$OUT" p
