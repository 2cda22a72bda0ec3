#!/usr/bin/env bash
# Session 37 run 4 (H200): scripts/device_check.sh on the prebuilt s37-dkfuse head (3c93183: v3.44 with the ticket in
# a line of its own, every workspace region on a 128-byte line), then its rows beside main's (f1cbb7d, .pb_m37,
# bench only), two rounds.   (run from the repository root; carry .gproj_commit, .prebuilt, .pb_m37)
set -u
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
GPROJ_COMMIT=3c9318384717 bash scripts/device_check.sh > "$OUT/device_check.log" 2>&1
echo "device_check: rc=$? at $(( $(date +%s) - t0 )) s"; cat "$OUT/summary.txt"
source scripts/device_env.sh
BENCHES=".pb_m37 .prebuilt" SHAPES="128:4096:0 128:8192:0 128:4096:1 64:4096:0" INPUTS="gaussian q4" \
  ONLY="baseline gproj-fb" ROUNDS=2 OUT="$OUT/ab" timeout 200 bash scripts/device_bench_ab.sh > "$OUT/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s (rc=$?)"
ab_summary "$OUT"/ab/ab.txt
