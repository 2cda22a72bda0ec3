#!/usr/bin/env bash
# session 19, run 1: s19-both (forward v2.6 + backward v3.20; .prebuilt) through device_candidate_tests.sh, then
# the A/B of main (e3290b1), s19-v26, s19-v320 and s19-both on the forward-statistics rows (gproj-fs) beside
# baseline and gproj, D = 128, N = 4k, two rounds, q x 4 one round; per-kernel times (NCU=1) of gproj-fs
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
B=".ab_main .ab_s19-v26 .ab_s19-v320 .prebuilt"
BENCHES="$B" SHAPES="128:4096:0 128:4096:1" ONLY="baseline gproj gproj-fs" ROUNDS=2 \
  OUT="$out/ab" timeout 200 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES="$B" SHAPES="128:4096:0" INPUTS="q4" ONLY="baseline gproj gproj-fs" ROUNDS=1 NCU=1 NCU_ONLY="gproj-fs" \
  OUT="$out/ab_q4" timeout 150 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
echo "ab q4 + ncu done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r1.tgz" -C "$OUT" r1
cat "$out/tests/summary.txt"
grep -hE '^(baseline|gproj)' "$out"/ab/ab.txt "$out"/ab_q4/ab.txt | awk '{print $1, $2, $3, $4, $9, $5, $6, $10, $11}' | sort | awk '{k=$1" "$3" "$4" "$5" "$9; f[k]=f[k]" "$6; s[k]=s[k]" "$7} END{for(k in s) print k, "fwd", f[k], "bwd", s[k]}' | sort
cat "$out"/ab_q4/ab_ncu.txt 2>/dev/null | head -60
tail -5 "$out/ab.log" "$out/ab_q4.log"
