#!/usr/bin/env bash
# Session 24, run 3: probe s24-f16c (the forward in FP16 with the integer running max, the per-row list test and
# appends and O's residual; the backward as s24-f16b) against main, forward and backward per kernel.
#   PACKS=".ab_main .ab_s24-f16c" bash .ab_s24/ab3.sh   (outputs in $OUT/r.tgz)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT PACKS=$PACKS" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian q4" ONLY="baseline gproj" ROUNDS=2 \
  OUT="$out/ab" timeout 240 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian q4" ONLY="baseline gproj" NCU_ONLY="baseline gproj" \
  ROUNDS=0 NCU=1 OUT="$out/ncu" timeout 240 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt
grep -E "^==|flash_fwd_wg|flash_bwd_wg|thresh|probe" "$out"/ncu/ab_ncu.txt | cut -c1-150
grep -il "mismatch\|wrong\|FAIL" "$out"/*/bench.err 2>/dev/null | head
tar czf "$OUT/r.tgz" -C "$OUT" r
