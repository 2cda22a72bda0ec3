#!/usr/bin/env bash
# session 17, run 4: s17-final's (.prebuilt) per-kernel times (ncu, warm) for baseline, gproj, gproj-fs, and the
# source pages of the three backward main kernels (non-causal, Gaussian) for the opcode mix
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0
t0=$(date +%s)
out="$OUT/r4"; mkdir -p "$out/pages"
source scripts/device_env.sh
BENCHES=".prebuilt" SHAPES="128:4096:0 128:4096:1" ROUNDS=0 NCU=1 NCU_ONLY="baseline gproj gproj-fs" \
  OUT="$out/ncu" timeout 150 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
bench=/tmp/ab_bench/$(cat .prebuilt/COMMIT)/cuda_attention_bench
for label in baseline gproj-fs gproj; do
  ncu_source_page "$out/pages" "$bench" flash_bwd_wg_kernel "$label" 128:4096:0
  echo "page $label at $(( $(date +%s) - t0 )) s"
done
python3 bench/ncu_opcode_mix.py baseline="$out/pages/sass_flash_bwd_wg_kernel_baseline.csv" \
  gproj-fs="$out/pages/sass_flash_bwd_wg_kernel_gproj-fs.csv" gproj="$out/pages/sass_flash_bwd_wg_kernel_gproj.csv" \
  --per 1048576 --top 40 > "$out/opcode_mix.txt" 2>&1
tar czf "$OUT/r4.tgz" -C "$OUT" r4
cat "$out/ncu/ab_ncu.txt"
cat "$out/opcode_mix.txt"
