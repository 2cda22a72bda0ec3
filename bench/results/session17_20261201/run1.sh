#!/usr/bin/env bash
# session 17, run 1: A/B of main (v3.15) against the s17 candidates; D = 128 rows, ncu per kernel, D = 64 rows
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0
t0=$(date +%s)
mkdir -p "$OUT/r"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/r/env.txt"
BENCHES=".ab_main .ab_s17-base3 .ab_s17-tdq-tiled .ab_s17-desc .ab_s17-desc-u .ab_s17-all .ab_s17-onesr" SHAPES="128:4096:0 128:4096:1" \
  ONLY="baseline gproj gproj-fs" ROUNDS=2 OUT="$OUT/r/ab128" timeout 250 bash scripts/device_bench_ab.sh > "$OUT/r/ab128.log" 2>&1
echo "ab128 done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_main .ab_s17-bulk64 .ab_s17-all" SHAPES="64:1024:1 64:4096:0" ONLY="baseline gproj" ROUNDS=2 \
  OUT="$OUT/r/ab64" timeout 100 bash scripts/device_bench_ab.sh > "$OUT/r/ab64.log" 2>&1
echo "ab64 done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_main .ab_s17-tdq-tiled .ab_s17-all .ab_s17-onesr" SHAPES="128:4096:0 128:4096:1" ROUNDS=0 NCU=1 \
  NCU_ONLY="baseline gproj" OUT="$OUT/r/ncu128" timeout 200 bash scripts/device_bench_ab.sh > "$OUT/r/ncu128.log" 2>&1
echo "ncu128 done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r1.tgz" -C "$OUT" r
grep -hE '^(baseline|gproj)' "$OUT"/r/ab128/ab.txt "$OUT"/r/ab64/ab.txt | awk '{print $1, $2, $3, $4, $6, $10, $11}' | sort | awk '{k=$1" "$2" "$3" "$4" "$7; s[k]=s[k]" "$5} END{for(k in s) print k, s[k]}' | sort
