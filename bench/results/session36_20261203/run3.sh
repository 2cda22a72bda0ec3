#!/usr/bin/env bash
# Session 36 run 3 (H200): scripts/device_check.sh on main with v3.43 (.prebuilt; its GPU tests, sanitizers, the
# audit, pytest with CUDA, attention_bench.py), then rows of main against v3.43c + v3.43d (.pb_relax, bench only;
# branch s36-relax: the dK/dV postprocess as thresh_dq's dependent, relaxed spin reads with one fence, thresh_dq as
# the dependent at D = 64 too), two rounds.
#   (run from the repository root; carry .gproj_commit, .prebuilt, .pb_relax)
set -u
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
GPROJ_COMMIT=$(cat .gproj_commit) OUT="$OUT/check" timeout 420 bash scripts/device_check.sh > "$OUT/check.log" 2>&1
echo "device_check rc=$? at $(( $(date +%s) - t0 )) s"
tail -45 "$OUT/check.log"
export CUDA_VISIBLE_DEVICES=0
source scripts/device_env.sh
BENCHES=".prebuilt .pb_relax" SHAPES="128:4096:0 128:4096:1 64:4096:0" INPUTS="gaussian" \
  ONLY="baseline gproj-fb" ROUNDS=2 OUT="$OUT/ab" timeout 150 bash scripts/device_bench_ab.sh > "$OUT/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s (rc=$?)"
ab_summary "$OUT"/ab/ab.txt
