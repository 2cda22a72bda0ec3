#!/usr/bin/env bash
# session 20, run 3: s20-append-b (v3.22b: v3.22 with the warp's vote before the products; .prebuilt) through
# device_candidate_tests.sh, then the A/B of main (e3290b1's kernels), s20-append (v3.22) and s20-append-b on
# baseline, gproj and gproj-fs: Gaussian three rounds, sink and q x 4 one round
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r3"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
bash scripts/device_candidate_tests.sh "$out/tests" > "$out/tests.log" 2>&1
echo "candidate tests rc=$? at $(( $(date +%s) - t0 )) s"
B=".ab_main .ab_s20-append .prebuilt"
BENCHES="$B" SHAPES="128:4096:0 128:4096:1" ONLY="baseline gproj gproj-fs" ROUNDS=3 \
  OUT="$out/ab" timeout 200 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES="$B" SHAPES="128:4096:0" INPUTS="sink q4" ONLY="gproj gproj-fs" ROUNDS=1 \
  OUT="$out/ab_q4" timeout 100 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
echo "ab sink q4 done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r3.tgz" -C "$OUT" r3
cat "$out/tests/summary.txt"
grep -hE '^(baseline|gproj)' "$out"/ab/ab.txt "$out"/ab_q4/ab.txt | awk '{print $1, $2, $3, $4, $9, $5, $6, $10, $11}' | sort | awk '{k=$1" "$3" "$4" "$5" "$9; f[k]=f[k]" "$6; s[k]=s[k]" "$7} END{for(k in s) print k, "fwd", f[k], "bwd", s[k]}' | sort
grep -E "FAILED|Failure" "$out/tests/cuda_tests.log" | head -20
