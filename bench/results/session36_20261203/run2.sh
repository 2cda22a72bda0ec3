#!/usr/bin/env bash
# Session 36 run 2 (H200): v3.43 + v3.43b (.pb_pdlbb, bench only; branch s36-pdl-base: the kernel after the
# backward's main kernel, thresh_dq for gproj and the dQ postprocess for baseline, launched as its programmatic
# dependent and waiting per head) and v3.43c on them (.pb_pdlc, branch s36-pdl-dk: the dK/dV postprocess as
# thresh_dq's dependent): v3.43c's GPU tests, memcheck and synccheck on the small cases, the audit with the bars; then
# rows of the three beside main's (.pb_m35: a1d60cf's bench, whose backward is main's).
#   (run from the repository root; carry .deps (runtime debs), .pb_m35, .pb_pdlbb, .pb_pdlc)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r2"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/pdlc && tar xJf .pb_pdlc/pack.tar.xz -C /tmp/pdlc
timeout 150 /tmp/pdlc/bin/cuda_tests >"$out/cuda_tests_pdlc.log" 2>&1
echo "cuda_tests v3.43c ($(cat .pb_pdlc/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_pdlc.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/pdlc/bin/cuda_tests "$small_cases" memcheck synccheck
timeout 100 /tmp/pdlc/bin/gproj check --suite stress --device all --quiet --json "$out/check_pdlc.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_pdlc.txt" 2>&1
echo "gproj check --device all (v3.43c): rc=$? at $(( $(date +%s) - t0 )) s"
tail -1 "$out/check_pdlc.txt"
BENCHES=".pb_m35 .pb_pdlbb .pb_pdlc" SHAPES="128:4096:0 128:4096:1 128:8192:0 64:4096:0" INPUTS="gaussian" \
  ONLY="baseline gproj-fb" ROUNDS=3 OUT="$out/ab" timeout 240 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s (rc=$?)"
BENCHES=".pb_m35 .pb_pdlbb .pb_pdlc" SHAPES="128:4096:0 128:4096:1" INPUTS="q4" \
  ONLY="baseline gproj-fb" ROUNDS=2 OUT="$out/abq" timeout 100 bash scripts/device_bench_ab.sh > "$out/abq.log" 2>&1
echo "q4 rows done at $(( $(date +%s) - t0 )) s (rc=$?)"
ab_summary "$out"/ab/ab.txt "$out"/abq/ab.txt
tar czf "$OUT/r2.tgz" -C "$OUT" r2 && rm -rf "$out"
