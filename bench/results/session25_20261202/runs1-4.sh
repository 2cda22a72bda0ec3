#!/usr/bin/env bash
# Session 25, runs 1-4 (one script; each run's packs and settings in its command, README.md): v3.34's forms against
# main's kernels (.ab_main), bench rows at D = 128 N = 4k and D = 64 N = 1k both ways (INPUTS, default Gaussian), then
# ncu per kernel of one warm backward at D = 128 (baseline and gproj). Outputs in $OUT/r.tgz. Run 1's copy had
# INPUTS="gaussian q4" written in, and also printed the forward's and the preprocess's ncu lines and grepped the
# benches' stderr for mismatches (none).
#   (run from a copy under .ab_s25/ in the repository root)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT PACKS=$PACKS" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1 64:1024:0 64:1024:1" INPUTS="${INPUTS:-gaussian}" ONLY="baseline gproj" \
  ROUNDS="${ROUNDS:-2}" OUT="$out/ab" timeout "${AB_TIMEOUT:-300}" bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian" ONLY="baseline gproj" NCU_ONLY="baseline gproj" \
  ROUNDS=0 NCU=1 OUT="$out/ncu" timeout "${NCU_TIMEOUT:-200}" bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt
grep -E "^==|flash_bwd_wg|thresh|postprocess|total" "$out"/ncu/ab_ncu.txt | cut -c1-150
tar czf "$OUT/r.tgz" -C "$OUT" r
