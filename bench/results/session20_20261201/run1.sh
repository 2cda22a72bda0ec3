#!/usr/bin/env bash
# session 20, run 1: s20-flags4 (block flags form 4: the test as a packed max under a warpgroup-uniform branch,
# the forward's row maxima in shared memory; .prebuilt) through device_candidate_tests.sh, then the A/B of main
# (e3290b1's kernels), s20-flags3 (the session-19 patch's third form, global scratch) and s20-flags4 on baseline,
# gproj and gproj-fs (Gaussian two rounds; q x 4 and sink one round with per-kernel times), and s20-flags4 with
# GPROJ_NO_BLOCK_FLAGS=1 (the packed test in every tile)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r1"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
bash scripts/device_candidate_tests.sh "$out/tests" > "$out/tests.log" 2>&1
echo "candidate tests rc=$? at $(( $(date +%s) - t0 )) s"
B=".ab_main .ab_s20-flags3 .prebuilt"
BENCHES="$B" SHAPES="128:4096:0 128:4096:1" ONLY="baseline gproj gproj-fs" ROUNDS=2 \
  OUT="$out/ab" timeout 150 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES="$B" SHAPES="128:4096:0" INPUTS="q4 sink" ONLY="baseline gproj gproj-fs" ROUNDS=1 NCU=1 \
  NCU_ONLY="gproj" OUT="$out/ab_q4" timeout 150 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
echo "ab q4 sink + ncu done at $(( $(date +%s) - t0 )) s"
GPROJ_NO_BLOCK_FLAGS=1 BENCHES=".prebuilt" SHAPES="128:4096:0 128:4096:1" ONLY="gproj gproj-fs" ROUNDS=1 \
  OUT="$out/ab_noflags" timeout 60 bash scripts/device_bench_ab.sh > "$out/ab_noflags.log" 2>&1
echo "no-flags rows done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r1.tgz" -C "$OUT" r1
cat "$out/tests/summary.txt"
grep -hE '^(baseline|gproj)' "$out"/ab/ab.txt "$out"/ab_q4/ab.txt | awk '{print $1, $2, $3, $4, $9, $5, $6, $10, $11}' | sort | awk '{k=$1" "$3" "$4" "$5" "$9; f[k]=f[k]" "$6; s[k]=s[k]" "$7} END{for(k in s) print k, "fwd", f[k], "bwd", s[k]}' | sort
echo "== no flags"; grep -hE '^(gproj)' "$out"/ab_noflags/ab.txt
grep -E "==|flash|thresh|total" "$out"/ab_q4/ab_ncu.txt 2>/dev/null | head -40
grep -E "FAILED|Failure|BlockFlags" "$out/tests/cuda_tests.log" | head -20
