#!/usr/bin/env bash
# Session 27 run 1: where thresh_dq_kernel's time goes on rows with listed entries (q x 4). Main's kernels
# (.ab_s27m: 23a729c, GPROJ_ABLATE=0) against two timing-only builds of the same commit: .ab_abl64 (thresh_dq
# without the listed entries' dK corrections) and .ab_abl128 (without those the warp's table has no slot for, i.e.
# without its direct atomics). ncu per kernel of one warm gproj backward, then ncu limits of thresh_dq (L2 and
# atomic throughput, stall reasons).
#   (run from .ab_s27r/ in the repository root, carrying .deps and the three .ab_* folders)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0
out="$OUT/r"; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/env.txt"
nvcc --version | tail -2 >> "$out/env.txt"
BENCHES=".ab_s27m .ab_abl64 .ab_abl128" SHAPES="128:4096:0 64:1024:1" INPUTS="gaussian q4" ONLY="gproj" \
  NCU_ONLY="gproj" ROUNDS=0 NCU=1 NCU_LIMITS=1 NCU_KERNEL=thresh_dq OUT="$out/ab" timeout 520 \
  bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "device_bench_ab rc=$?"
grep -E "^==|thresh|postprocess|total" "$out"/ab/ab_ncu.txt | cut -c1-150
cat "$out"/ab/ab_limits.txt | cut -c1-200
tar czf "$OUT/r.tgz" -C "$OUT" r
