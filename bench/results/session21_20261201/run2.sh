#!/usr/bin/env bash
# session 21, run 2: where gproj's main-kernel time goes now (main e23e837 and its ablations: 1 the statistics
# product, 4 the record atomics, 8 the large-entry test and lists, 15 all four parts); the v3.1 backward (warpgroups
# not coupled by a per-block barrier) for both variants; s21-tdq4 (thresh_dq at __launch_bounds__(256, 4))
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r2"; mkdir -p "$out"
source scripts/device_env.sh
ABL=".ab_main .ab_main_ablate1 .ab_main_ablate4 .ab_main_ablate8 .ab_main_ablate15"
BENCHES="$ABL" SHAPES="128:4096:0 128:4096:1" ONLY="gproj" ROUNDS=2 \
  OUT="$out/ab" timeout 120 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "ablations gaussian done at $(( $(date +%s) - t0 )) s"
BENCHES="$ABL" SHAPES="128:4096:0" INPUTS="q4 sink" ONLY="gproj" ROUNDS=1 \
  OUT="$out/ab_q4" timeout 60 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
echo "ablations q4 sink done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_main" SHAPES="128:4096:0 128:4096:1" ONLY="baseline gproj base-v31 gproj-v31" ROUNDS=2 \
  OUT="$out/v31" timeout 80 bash scripts/device_bench_ab.sh > "$out/v31.log" 2>&1
echo "v3.1 done at $(( $(date +%s) - t0 )) s"
BENCHES=".ab_main .ab_s21-tdq4" SHAPES="128:4096:0" INPUTS="gaussian q4 sink" ONLY="gproj" ROUNDS=2 NCU=1 \
  OUT="$out/tdq4" timeout 150 bash scripts/device_bench_ab.sh > "$out/tdq4.log" 2>&1
echo "tdq4 done at $(( $(date +%s) - t0 )) s"
BENCHES="$ABL" SHAPES="128:4096:0" INPUTS="gaussian" ONLY="gproj" ROUNDS=0 NCU=1 \
  OUT="$out/ncu" timeout 100 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt "$out"/ab_q4/ab.txt "$out"/v31/ab.txt "$out"/tdq4/ab.txt
grep -E "^==|flash_bwd_wg|thresh_dq" "$out"/tdq4/ab_ncu.txt "$out"/ncu/ab_ncu.txt | sed 's/^.*ab_ncu.txt://'
tar czf "$OUT/r2.tgz" -C "$OUT" r2
