#!/usr/bin/env bash
# Session 26 run 5 (experiment, not merged unless it wins): thresh_dq_kernel at __launch_bounds__(256, 4) (64
# registers, 4 blocks per SM) prebuilt in .prebuilt (7c14442), against main's kernels (.ab_s26m, cf4a62a's bench;
# thresh_dq is the same there as on 4d81673). The GPU tests first, then ncu per kernel of one warm gproj backward and
# the bench rows.
#   (run from .ab_s26r3/ in the repository root)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
out="$OUT/r"; mkdir -p "$out"
note() { echo "== $1"; }
source scripts/device_env.sh
echo "prebuilt=$prebuilt GPROJ_COMMIT=$GPROJ_COMMIT" | tee "$out/env.txt"
timeout 150 .prebuilt/bin/cuda_tests >"$out/cuda_tests.log" 2>&1
echo "cuda_tests: rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests.log")"
BENCHES=".ab_s26m .prebuilt" SHAPES="128:4096:0 128:4096:1 64:1024:0" INPUTS="gaussian q4" ONLY="gproj" NCU_ONLY="gproj" \
  ROUNDS=0 NCU=1 OUT="$out/ncu" timeout 150 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
grep -E "^==|thresh|postprocess|total" "$out"/ncu/ab_ncu.txt | cut -c1-150
tar czf "$OUT/r.tgz" -C "$OUT" r
