#!/usr/bin/env bash
# session 20, run 2: s20-append (backward v3.22: the rest of a warp's list entries appended by the whole warp, 32
# atomics at a time; .prebuilt) through device_candidate_tests.sh, then the A/B of main (e3290b1's kernels) and
# s20-append on baseline, gproj and gproj-fs: Gaussian two rounds, q x 4 and sink two rounds with per-kernel times
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r2"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
bash scripts/device_candidate_tests.sh "$out/tests" > "$out/tests.log" 2>&1
echo "candidate tests rc=$? at $(( $(date +%s) - t0 )) s"
B=".ab_main .prebuilt"
BENCHES="$B" SHAPES="128:4096:0 128:4096:1" ONLY="baseline gproj gproj-fs" ROUNDS=2 \
  OUT="$out/ab" timeout 120 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES="$B" SHAPES="128:4096:0 128:4096:1" INPUTS="q4 sink" ONLY="baseline gproj gproj-fs" ROUNDS=2 NCU=1 \
  NCU_ONLY="gproj gproj-fs" OUT="$out/ab_q4" timeout 200 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
echo "ab q4 sink + ncu done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r2.tgz" -C "$OUT" r2
cat "$out/tests/summary.txt"
grep -hE '^(baseline|gproj)' "$out"/ab/ab.txt "$out"/ab_q4/ab.txt | awk '{print $1, $2, $3, $4, $9, $5, $6, $10, $11}' | sort | awk '{k=$1" "$3" "$4" "$5" "$9; f[k]=f[k]" "$6; s[k]=s[k]" "$7} END{for(k in s) print k, "fwd", f[k], "bwd", s[k]}' | sort
grep -E "==|flash_bwd|thresh" "$out"/ab_q4/ab_ncu.txt 2>/dev/null | head -60
grep -E "FAILED|Failure" "$out/tests/cuda_tests.log" | head -20
