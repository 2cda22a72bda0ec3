#!/usr/bin/env bash
# Session 24, runs 2-4 (one script; each run's settings below and in README.md): probe packs against main's, bench
# rows on Gaussian and q x 4 inputs at D = 128, N = 4k both ways, then ncu per kernel of one warm backward.
#   run 2: PACKS=".ab_main .ab_s24-f16b .ab_s24-f16b_ablate5" bash runs2-4.sh
#   run 3: PACKS=".ab_main .ab_s24-f16c" bash runs2-4.sh
#   run 4: PACKS=".ab_main .ab_s24-f16d_ablate13 .ab_s24-f16d_ablate5 .ab_s24-f16d_ablate6 .ab_s24-f16d_ablate4
#          .ab_s24-f16c .ab_s24-f16e" ONLY=baseline ROUNDS=1 AB_TIMEOUT=250 NCU_TIMEOUT=300 bash runs2-4.sh
# (run from a copy under .ab_s24/ in the repository root; outputs in $OUT/r.tgz)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r"; mkdir -p "$out"
source scripts/device_env.sh
only=${ONLY:-baseline gproj}
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT PACKS=$PACKS" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian q4" ONLY="$only" ROUNDS="${ROUNDS:-2}" \
  OUT="$out/ab" timeout "${AB_TIMEOUT:-240}" bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES="$PACKS" SHAPES="128:4096:0 128:4096:1" INPUTS="gaussian q4" ONLY="$only" NCU_ONLY="$only" \
  ROUNDS=0 NCU=1 OUT="$out/ncu" timeout "${NCU_TIMEOUT:-240}" bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt
grep -E "^==|flash_fwd_wg|flash_bwd_wg|thresh|probe|preprocess|postprocess" "$out"/ncu/ab_ncu.txt | cut -c1-150
grep -il "mismatch\|wrong\|FAIL" "$out"/*/bench.err 2>/dev/null | head
tar czf "$OUT/r.tgz" -C "$OUT" r
