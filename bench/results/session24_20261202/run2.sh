#!/usr/bin/env bash
# Session 24, run 2: probe s24-f16b (the backward main kernel in FP16 on FP16 copies of the inputs; its ABLATE=5
# build keeps of gproj's main-kernel parts only bf16(P) in shared memory and the large-entry lists) against main.
#   PACKS=".ab_main .ab_s24-f16b .ab_s24-f16b_ablate5" bash .ab_s24/ab2.sh   (outputs in $OUT/r.tgz)
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
grep -E "^==|flash_bwd_wg|thresh|probe|preprocess|postprocess" "$out"/ncu/ab_ncu.txt | cut -c1-150
grep -il "mismatch\|wrong\|FAIL" "$out"/*/bench.err 2>/dev/null | head
tar czf "$OUT/r.tgz" -C "$OUT" r
