#!/usr/bin/env bash
# session 17, run 3: s17-final (.prebuilt) at D = 64 against main; then device_check.sh's Python part (pytest with
# CUDA, the side by side with SDPA)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0
t0=$(date +%s)
mkdir -p "$OUT/r3"
BENCHES=".ab_main .prebuilt" SHAPES="64:1024:0 64:1024:1" ONLY="baseline gproj" ROUNDS=1 \
  OUT="$OUT/r3/ab64" timeout 80 bash scripts/device_bench_ab.sh > "$OUT/r3/ab64.log" 2>&1
echo "ab64 done at $(( $(date +%s) - t0 )) s"
ONLY_PYTHON=1 OUT="$OUT/r3/check" timeout 470 bash scripts/device_check.sh > "$OUT/r3/check.log" 2>&1
echo "check done at $(( $(date +%s) - t0 )) s"
cp "$OUT/r3/check/attention_bench.txt" "$OUT/r3/check/summary.txt" "$OUT/" 2>/dev/null
tar czf "$OUT/r3.tgz" -C "$OUT" r3
cat "$OUT/r3/ab64/ab.txt"
tail -45 "$OUT/r3/check.log"
