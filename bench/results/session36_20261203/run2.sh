#!/usr/bin/env bash
# Session 36 run 2 (H200): v3.43 + v3.43b (.pb_pdlb, branch s36-pdl-base: the kernel after the backward's main kernel,
# thresh_dq for gproj and the dQ postprocess for baseline, launched as its programmatic dependent and waiting per
# head): its GPU tests, memcheck and synccheck on the small cases, the audit with the bars; then rows beside main's
# (.pb_m35: a1d60cf's bench, whose backward is main's), three rounds.
#   (run from the repository root; carry .deps (runtime debs), .pb_m35, .pb_pdlb)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r2"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/pdlb && tar xJf .pb_pdlb/pack.tar.xz -C /tmp/pdlb
timeout 150 /tmp/pdlb/bin/cuda_tests >"$out/cuda_tests_pdlb.log" 2>&1
echo "cuda_tests v3.43b ($(cat .pb_pdlb/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_pdlb.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/pdlb/bin/cuda_tests "$small_cases" memcheck synccheck
timeout 100 /tmp/pdlb/bin/gproj check --suite stress --device all --quiet --json "$out/check_pdlb.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_pdlb.txt" 2>&1
echo "gproj check --device all (v3.43b): rc=$? at $(( $(date +%s) - t0 )) s"
tail -1 "$out/check_pdlb.txt"
BENCHES=".pb_m35 .pb_pdlb" SHAPES="128:4096:0 128:4096:1 128:8192:0 64:4096:0" INPUTS="gaussian q4" \
  ONLY="baseline gproj-fb" ROUNDS=3 OUT="$out/ab" timeout 260 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s (rc=$?)"
ab_summary "$out"/ab/ab.txt
tar czf "$OUT/r2.tgz" -C "$OUT" r2 && rm -rf "$out"
