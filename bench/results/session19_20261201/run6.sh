#!/usr/bin/env bash
# session 19, run 6: s19-flags with the flags loaded an iteration ahead (.prebuilt): cuda_tests and memcheck on the
# small cases, then the A/B of main (e3290b1's kernels) and s19-flags on baseline, gproj and gproj-fs (Gaussian
# two rounds; q x 4 and sink one round), and s19-flags with GPROJ_NO_BLOCK_FLAGS=1
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r6"; mkdir -p "$out"
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
timeout 150 .prebuilt/bin/cuda_tests > "$out/cuda_tests.log" 2>&1
echo "cuda_tests rc=$? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | head -2 | tr '\n' ' ')"
run_sanitizers "$out" .prebuilt/bin/cuda_tests "$small_cases:Cuda.BlockFlagsChangeNoOutputBit" memcheck
B=".ab_main .prebuilt"
BENCHES="$B" SHAPES="128:4096:0 128:4096:1" ONLY="baseline gproj gproj-fs" ROUNDS=2 \
  OUT="$out/ab" timeout 120 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
BENCHES="$B" SHAPES="128:4096:0" INPUTS="q4 sink" ONLY="baseline gproj gproj-fs" ROUNDS=1 \
  OUT="$out/ab_q4" timeout 60 bash scripts/device_bench_ab.sh > "$out/ab_q4.log" 2>&1
GPROJ_NO_BLOCK_FLAGS=1 BENCHES=".prebuilt" SHAPES="128:4096:0 128:4096:1" ONLY="gproj gproj-fs" ROUNDS=1 \
  OUT="$out/ab_noflags" timeout 60 bash scripts/device_bench_ab.sh > "$out/ab_noflags.log" 2>&1
echo "benches done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r6.tgz" -C "$OUT" r6
grep -hE '^(baseline|gproj)' "$out"/ab/ab.txt "$out"/ab_q4/ab.txt | awk '{print $1, $2, $3, $4, $9, $5, $6, $10, $11}' | sort | awk '{k=$1" "$3" "$4" "$5" "$9; f[k]=f[k]" "$6; s[k]=s[k]" "$7} END{for(k in s) print k, "fwd", f[k], "bwd", s[k]}' | sort
echo "== no flags"; grep -hE '^(gproj)' "$out"/ab_noflags/ab.txt
grep -E "FAILED|BlockFlags" "$out/cuda_tests.log" | head -10
