#!/usr/bin/env bash
# Session 33 run 2: forward v2.7 (branch s33-pp: the two warpgroups take turns, by named barriers, to issue S of
# the next block and P V of this one; FlashAttention-3's ping-pong) against main (bbfb048, .prebuilt). The
# candidate's GPU tests, compute-sanitizer memcheck / racecheck / synccheck on the small cases and the forward's
# q97 ones, `gproj check` with the bars, then forward and backward rows of baseline, fwdfix and gproj-fb, both
# builds in turn, three rounds.
#   (run from the repository root; carry .prebuilt, .pb_pp)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r2"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/pp && tar xJf .pb_pp/pack.tar.xz -C /tmp/pp
timeout 150 /tmp/pp/bin/cuda_tests >"$out/cuda_tests_pp.log" 2>&1
echo "cuda_tests pp ($(cat .pb_pp/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_pp.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/pp/bin/cuda_tests "$small_cases:*WgmmaForward*q97*" memcheck racecheck synccheck
timeout 90 /tmp/pp/bin/gproj check --suite stress --device all --quiet --json "$out/check_pp.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_pp.txt" 2>&1
echo "gproj check --device all (pp): rc=$? at $(( $(date +%s) - t0 )) s"
BENCHES=".prebuilt .pb_pp" SHAPES="128:4096:0 128:4096:1 128:8192:0 128:8192:1 64:4096:0 128:1024:0" \
  INPUTS="gaussian" ONLY="baseline fwdfix gproj-fb" ROUNDS=3 OUT="$out/rows" timeout 300 bash scripts/device_bench_ab.sh \
  > "$out/rows.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
grep -E "gproj|baseline|fwdfix" "$out"/rows/ab.txt | sort -k2,2n -k3,3n -k4,4 -k1,1 | awk '{print $1,$2,$3,$4,$5,$6,$10,$11}' | head -120
tar czf "$OUT/r2.tgz" -C "$OUT" r2 && rm -rf "$out"
