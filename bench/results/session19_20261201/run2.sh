#!/usr/bin/env bash
# session 19, run 2: s19-both2 (forward v2.6 + backward v3.20b; .prebuilt) through device_candidate_tests.sh, the
# A/B of main (e3290b1), s19-v320, s19-v320b, s19-v320b with ABLATE=8 (no large-entry test: timing only) and s19-both2 on gproj-fs beside baseline (Gaussian two rounds; q x 4
# and sink one round, per-kernel times), then the ncu source pages of thresh_dq on q x 4 rows and of eig_kernel
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r2"; mkdir -p "$out/pages"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$out/env.txt" 2>&1
bash scripts/device_candidate_tests.sh "$out/tests" > "$out/tests.log" 2>&1
echo "candidate tests rc=$? at $(( $(date +%s) - t0 )) s"
B=".ab_main .ab_s19-v320 .ab_s19-v320b .ab_s19-v320b_ablate8 .prebuilt"
BENCHES="$B" SHAPES="128:4096:0 128:4096:1" ONLY="baseline gproj-fs" ROUNDS=2 \
  OUT="$out/ab" timeout 150 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ab done at $(( $(date +%s) - t0 )) s"
BENCHES="$B" SHAPES="128:4096:0" INPUTS="q4 sink" ONLY="baseline gproj-fs" ROUNDS=1 NCU=1 NCU_ONLY="gproj-fs" \
  OUT="$out/ab_q4" timeout 150 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
echo "ab q4 sink + ncu done at $(( $(date +%s) - t0 )) s"
bench=/tmp/ab_bench/$(cat .prebuilt/COMMIT)/cuda_attention_bench
ncu_source_page "$out/pages" "$bench" thresh_dq_kernel gproj 128:4096:0 --q-scale 4
ncu_source_page "$out/pages" "$bench" eig_kernel gproj 128:4096:0
xz -9 "$out"/pages/sass_*.csv
echo "pages done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r2.tgz" -C "$OUT" r2
cat "$out/tests/summary.txt"
grep -hE '^(baseline|gproj)' "$out"/ab/ab.txt "$out"/ab_q4/ab.txt | awk '{print $1, $2, $3, $4, $9, $5, $6, $10, $11}' | sort | awk '{k=$1" "$3" "$4" "$5" "$9; f[k]=f[k]" "$6; s[k]=s[k]" "$7} END{for(k in s) print k, "fwd", f[k], "bwd", s[k]}' | sort
grep -E "==|flash|thresh|total" "$out"/ab_q4/ab_ncu.txt 2>/dev/null | head -60
head -30 "$out"/pages/stall_top_thresh_dq_kernel_gproj.txt
head -20 "$out"/pages/stall_top_eig_kernel_gproj.txt
