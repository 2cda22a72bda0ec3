#!/usr/bin/env bash
# session 19, run 4: ncu source pages of the backward main kernel for gproj-fs and gproj on Gaussian rows, main
# (e3290b1) against main with ABLATE=8 (no large-entry test): where the test's ~100-210 µs go (stall reasons and
# executed instructions by opcode)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0
t0=$(date +%s)
out="$OUT/r4"; mkdir -p "$out/pages"
source scripts/device_env.sh
for d in .ab_main .ab_main_ablate8; do mkdir -p "/tmp/$d" && tar xJf "$d/bench.tar.xz" -C "/tmp/$d"; done
for v in gproj-fs gproj; do
  mkdir -p "$out/pages/main" "$out/pages/abl"
  ncu_source_page "$out/pages/main" /tmp/.ab_main/cuda_attention_bench flash_bwd_wg_kernel "$v" 128:4096:0
  ncu_source_page "$out/pages/abl" /tmp/.ab_main_ablate8/cuda_attention_bench flash_bwd_wg_kernel "$v" 128:4096:0
  python3 bench/ncu_opcode_mix.py abl="$out/pages/abl/sass_flash_bwd_wg_kernel_$v.csv" \
    main="$out/pages/main/sass_flash_bwd_wg_kernel_$v.csv" --top 25 > "$out/opcode_mix_$v.txt" 2>&1
done
echo "pages done at $(( $(date +%s) - t0 )) s"
xz -9 "$out"/pages/*/sass_*.csv
rm -f "$out"/pages/*/details_*.txt
tar czf "$OUT/r4.tgz" -C "$OUT" r4
for v in gproj-fs gproj; do
  for k in main abl; do echo "== $v $k"; head -2 "$out/pages/$k/stall_top_flash_bwd_wg_kernel_$v.txt"; done
  head -30 "$out/opcode_mix_$v.txt"
done
