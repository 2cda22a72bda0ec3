#!/usr/bin/env bash
# Session 27 run 4: thresh_dq on `local` rows (queries from nearby keys, keys repeating as in the captured states):
# 0e4dde3 (.ab_s27l) against its timing-only build without the listed entries' dK corrections (.ab_abl64l,
# GPROJ_ABLATE=64). ncu per kernel of one warm gproj backward, then ncu limits of thresh_dq.
#   (run from .ab_s27r/ in the repository root; carry .deps, .ab_s27l, .ab_abl64l, .ab_s27r)
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES=0
out="$OUT/r4"; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/env.txt"
BENCHES=".ab_s27l .ab_abl64l" SHAPES="128:4096:0 128:4096:1" INPUTS="local" ONLY="gproj" NCU_ONLY="gproj" ROUNDS=0 \
  NCU=1 NCU_LIMITS=1 NCU_KERNEL=thresh_dq OUT="$out/ab" timeout 300 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "device_bench_ab rc=$?"
grep -E "^==|thresh|total" "$out"/ab/ab_ncu.txt | cut -c1-150
grep -E "^(time|instructions|issue|L2 thr|L2 atomic|stall (long|wait|short|barrier))|^ +gproj" "$out"/ab/ab_limits.txt | cut -c1-200
cp "$out"/ab/ab_ncu.txt "$out"/ab/ab_limits.txt "$out"/
tar czf "$OUT/r4.tgz" -C "$OUT" r4
