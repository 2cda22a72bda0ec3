#!/usr/bin/env bash
# Session 24: the FP16 probe's baseline row against main's (bench rows, then ncu per kernel), Gaussian inputs.
#   PACKS=".ab_main .ab_s24-f16" bash .ab_s24/ab.sh   (outputs in $OUT/r.tgz)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT PACKS=$PACKS" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1 64:1024:0" ONLY="${ONLY:-baseline}" ROUNDS=2 \
  OUT="$out/ab" timeout 200 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian" ONLY="${ONLY:-baseline}" NCU_ONLY="${NCU_ONLY:-baseline}" \
  ROUNDS=0 NCU=1 OUT="$out/ncu" timeout 150 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt
cat "$out"/ncu/ab_ncu.txt | cut -c1-200 | head -80
tar czf "$OUT/r.tgz" -C "$OUT" r
