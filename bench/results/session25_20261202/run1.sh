#!/usr/bin/env bash
# Session 25, run 1: v3.34 (dK, dV stored by the main kernel; the branch's .prebuilt) against main's kernels
# (.ab_main), bench rows on Gaussian and q x 4 inputs at D = 128 N = 4k and D = 64 N = 1k both ways, then ncu per
# kernel of one warm backward (baseline and gproj). Outputs in $OUT/r.tgz.
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT PACKS=$PACKS" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1 64:1024:0 64:1024:1" INPUTS="gaussian q4" ONLY="baseline gproj" \
  ROUNDS="${ROUNDS:-2}" OUT="$out/ab" timeout "${AB_TIMEOUT:-300}" bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian" ONLY="baseline gproj" NCU_ONLY="baseline gproj" \
  ROUNDS=0 NCU=1 OUT="$out/ncu" timeout "${NCU_TIMEOUT:-200}" bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt
grep -E "^==|flash_fwd_wg|flash_bwd_wg|thresh|preprocess|postprocess|total" "$out"/ncu/ab_ncu.txt | cut -c1-150
grep -il "mismatch\|wrong\|FAIL" "$out"/*/bench.err 2>/dev/null | head
tar czf "$OUT/r.tgz" -C "$OUT" r
