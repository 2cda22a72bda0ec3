#!/usr/bin/env bash
# Session 24, run 4: ablations of the FP16 forward probe (s24-f16d: ABLATE 13 = FP16 alone, 5 + integer max,
# 6 + the list test, 4 + the appends, s24-f16c + O's residual) and s24-f16e (the backward with eps tiles on
# the diagonal band), baseline rows, one round, forward and backward per kernel.
#   PACKS=".ab_main .ab_s24-f16d_ablate13 ..." bash .ab_s24/ab4.sh   (outputs in $OUT/r.tgz)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT PACKS=$PACKS" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian q4" ONLY="baseline" ROUNDS=1 \
  OUT="$out/ab" timeout 250 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian q4" ONLY="baseline" NCU_ONLY="baseline" \
  ROUNDS=0 NCU=1 OUT="$out/ncu" timeout 300 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt
grep -E "^==|flash_fwd_wg|flash_bwd_wg|thresh|probe" "$out"/ncu/ab_ncu.txt | cut -c1-150
grep -il "mismatch\|wrong\|FAIL" "$out"/*/bench.err 2>/dev/null | head
tar czf "$OUT/r.tgz" -C "$OUT" r
