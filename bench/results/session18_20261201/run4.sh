#!/usr/bin/env bash
# session 18, run 4: the source pages (ncu --set full) of the backward main kernel of main (92b9351), baseline and
# gproj, D = 128, N = 4k, non-causal, Gaussian: per-instruction shared-memory wavefronts (ideal and excessive)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0
t0=$(date +%s)
out="$OUT/r4"; mkdir -p "$out/pages"
source scripts/device_env.sh
mkdir -p /tmp/ab_bench/main && tar xJf .ab_main/bench.tar.xz -C /tmp/ab_bench/main
bench=/tmp/ab_bench/main/cuda_attention_bench
for label in baseline gproj; do
  ncu_source_page "$out/pages" "$bench" flash_bwd_wg_kernel "$label" 128:4096:0
  echo "page $label at $(( $(date +%s) - t0 )) s"
done
xz -9 "$out"/pages/sass_*.csv
tar czf "$OUT/r4.tgz" -C "$OUT" r4
head -3 "$out"/pages/stall_top_*
