#!/usr/bin/env bash
# Session 36 run 1 (H200):
#   1. ncu's source page (stall samples and executed instructions per SASS instruction) of the backward main
#      kernel, baseline against gproj, D = 128, N = 4k, Gaussian, main's kernels (.pb_m35: a1d60cf's bench, whose
#      backward is main's), and per-kernel times of one backward of both on Gaussian and q x 4 rows;
#   2. v3.42 (.pb_hmax, branch s36-hmax: the large-entry test by packed bf16 maxima): its GPU tests, the sanitizers
#      on the small cases, the audit with the bars;
#   3. rows of both builds side by side, three rounds.
#   (run from the repository root; carry .deps (runtime debs), .pb_m35, .pb_hmax)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r1"; mkdir -p "$out/src"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/m35 /tmp/hmax && tar xJf .pb_m35/bench.tar.xz -C /tmp/m35 && tar xJf .pb_hmax/pack.tar.xz -C /tmp/hmax
mb=$(find /tmp/m35 -name cuda_attention_bench -type f | head -1)
for label in baseline gproj; do
  ncu_source_page "$out/src" "$mb" flash_bwd_wg_kernel "$label" 128:4096:0
  for kind in gaussian q4; do
    # shellcheck disable=SC2046
    timeout 120 ncu --metrics gpu__time_duration.sum --csv --print-units base "$mb" --only "$label" \
      --shape 128:4096:0 --reps 1 $(input_args $kind) >"$out/src/times_128_4096_0_${kind}_$label.csv" 2>/dev/null
  done
done
echo "source pages at $(( $(date +%s) - t0 )) s"
python3 bench/ncu_times.py --compare "$out/src" > "$out/times.txt" 2>&1; head -40 "$out/times.txt"
timeout 150 /tmp/hmax/bin/cuda_tests >"$out/cuda_tests_hmax.log" 2>&1
echo "cuda_tests v3.42 ($(cat .pb_hmax/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_hmax.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/hmax/bin/cuda_tests "$small_cases" memcheck racecheck
timeout 90 /tmp/hmax/bin/gproj check --suite stress --device all --quiet --json "$out/check_hmax.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_hmax.txt" 2>&1
echo "gproj check --device all (v3.42): rc=$? at $(( $(date +%s) - t0 )) s"
BENCHES=".pb_m35 .pb_hmax" SHAPES="128:4096:0 128:4096:1 64:4096:0" INPUTS="gaussian q4" \
  ONLY="baseline gproj-fb" ROUNDS=3 OUT="$out/ab" timeout 200 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
ab_summary "$out"/ab/ab.txt
for f in "$out"/src/stall_top_*; do echo "== $f"; head -12 "$f"; done
tar czf "$OUT/r1.tgz" -C "$OUT" r1 && rm -rf "$out"
