#!/usr/bin/env bash
# session 19, run 3: s19-v321 (claims after the dK, dV issue; .prebuilt) through device_candidate_tests.sh, then
# the A/B of main (e3290b1's backward, the same kernels as c9ed04a's), main with ABLATE=8 (no large-entry test and
# no lists in the main kernel: timing only, gradients wrong) and s19-v321 on baseline, gproj and gproj-fs
# (Gaussian two rounds; q x 4 and sink one round with per-kernel times)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r3"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
bash scripts/device_candidate_tests.sh "$out/tests" > "$out/tests.log" 2>&1
echo "candidate tests rc=$? at $(( $(date +%s) - t0 )) s"
B=".ab_main .ab_main_ablate8 .prebuilt"
BENCHES="$B" SHAPES="128:4096:0 128:4096:1" ONLY="baseline gproj gproj-fs" ROUNDS=2 \
  OUT="$out/ab" timeout 150 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES="$B" SHAPES="128:4096:0" INPUTS="q4 sink" ONLY="baseline gproj gproj-fs" ROUNDS=1 NCU=1 \
  NCU_ONLY="gproj gproj-fs" OUT="$out/ab_q4" timeout 170 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
echo "ab q4 sink + ncu done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r3.tgz" -C "$OUT" r3
cat "$out/tests/summary.txt"
grep -hE '^(baseline|gproj)' "$out"/ab/ab.txt "$out"/ab_q4/ab.txt | awk '{print $1, $2, $3, $4, $9, $5, $6, $10, $11}' | sort | awk '{k=$1" "$3" "$4" "$5" "$9; f[k]=f[k]" "$6; s[k]=s[k]" "$7} END{for(k in s) print k, "fwd", f[k], "bwd", s[k]}' | sort
grep -E "==|flash_bwd|thresh|total" "$out"/ab_q4/ab_ncu.txt 2>/dev/null | head -80
