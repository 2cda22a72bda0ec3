#!/usr/bin/env bash
# Session 35 run 4 (H200): the backward main kernel's limits and stall reasons (ncu), baseline against gproj-fb, at
# D = 128, N = 4k (Gaussian and q x 4 rows): is the backward, like the forward, bound by latency with two warps per
# scheduler? The backward kernels are main's (a1d60cf's bench, .pb_m35: the backward has not changed since).
#   (run from the repository root; carry .deps holding only the runtime debs and .pb_m35)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r4"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
BENCHES=".pb_m35" SHAPES="128:4096:0" INPUTS="gaussian q4" ROUNDS=0 NCU_LIMITS=1 NCU_ONLY="baseline gproj-fb" \
  NCU_KERNEL=flash_bwd_wg OUT="$out/ncu" timeout 240 bash scripts/device_bench_ab.sh > "$out/ncu.log" 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s (rc=$?)"
cat "$out/ncu/ab_limits.txt" 2>/dev/null
tar czf "$OUT/r4.tgz" -C "$OUT" r4 && rm -rf "$out"
