#!/usr/bin/env bash
# session 20, run 5: s20-append-e (v3.22e: the early claims' entries written after the dK, dV wait, not after the dQ
# product; .prebuilt): the A/B of main (3759d5f: v3.22) and s20-append-e on
# gproj and gproj-fs: Gaussian two rounds, sink and q x 4 two rounds, then device_candidate_tests.sh
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r5"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
B=".ab_main .prebuilt"
BENCHES="$B" SHAPES="128:4096:0 128:4096:1" ONLY="gproj gproj-fs" ROUNDS=2 \
  OUT="$out/ab" timeout 150 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES="$B" SHAPES="128:4096:0" INPUTS="sink q4" ONLY="gproj gproj-fs" ROUNDS=2 \
  OUT="$out/ab_q4" timeout 100 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
echo "ab sink q4 done at $(( $(date +%s) - t0 )) s"
grep -hE '^(baseline|gproj)' "$out"/ab/ab.txt "$out"/ab_q4/ab.txt | awk '{print $1, $2, $3, $4, $9, $5, $6, $10, $11}' | sort | awk '{k=$1" "$3" "$4" "$5" "$9; f[k]=f[k]" "$6; s[k]=s[k]" "$7} END{for(k in s) print k, "fwd", f[k], "bwd", s[k]}' | sort
if [ "${TESTS:-1}" = 1 ]; then
  bash scripts/device_candidate_tests.sh "$out/tests" > "$out/tests.log" 2>&1
  echo "candidate tests rc=$? at $(( $(date +%s) - t0 )) s"
  cat "$out/tests/summary.txt"
  grep -E "FAILED|Failure" "$out/tests/cuda_tests.log" | head -20
fi
tar czf "$OUT/r5.tgz" -C "$OUT" r5
