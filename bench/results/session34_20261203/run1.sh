#!/usr/bin/env bash
# Session 34 run 1 (H200). Run from the repository root with carry [.deps (runtime debs only), .pb_main, .pb_rec, .pb_rec4].
# The main kernel's statistics record, two ways (perf-notes "Next (for session 34)"):
#   .pb_rec  (branch probe/record 55b0da6, bench only): GPROJ_PROBE_SKIP_RECORD=1 skips the record's atomics at run
#            time (gradients then wrong), keeping the product and the atomics' code (its SASS is main's);
#   .pb_rec4 (branch s34-rec4, v3.41: one 16-byte REDG per lane and warp instead of two 8-byte ones; cuda_tests,
#            gproj, cuda_attention_bench): its GPU tests, memcheck on the small cases, the audit with the bars;
#   .pb_main (main's cuda_attention_bench, bbfb048's kernels).
# Then rows: baseline, gproj-fb, gproj (probe with and without the flag; v3.41 and main), Gaussian and q x 4,
# three rounds.
#   (run from the repository root. Carry limit 64 MiB with the tree (38 MB): carry .deps holding only the runtime
#   debs (cp -r .prebuilt/debs into an emptied .deps, as session 33 run 4 did), .pb_main, .pb_rec, .pb_rec4)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r1"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/rec4 /tmp/rec && tar xJf .pb_rec4/pack.tar.xz -C /tmp/rec4 && tar xJf .pb_rec/bench.tar.xz -C /tmp/rec
timeout 150 /tmp/rec4/bin/cuda_tests >"$out/cuda_tests_rec4.log" 2>&1
echo "cuda_tests rec4 ($(cat .pb_rec4/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_rec4.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/rec4/bin/cuda_tests "$small_cases" memcheck
timeout 90 /tmp/rec4/bin/gproj check --suite stress --device all --quiet --json "$out/check_rec4.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_rec4.txt" 2>&1
echo "gproj check --device all (rec4): rc=$? at $(( $(date +%s) - t0 )) s"
for r in 1 2 3; do
  for shape in 128:4096:0 128:4096:1 128:8192:0; do
    for args in "" "--q-scale 4"; do
      for v in baseline gproj-fb gproj; do
        for skip in 0 1; do
          # shellcheck disable=SC2086
          echo "probe skip=$skip r$r $args $(GPROJ_PROBE_SKIP_RECORD=$skip timeout 60 /tmp/rec/cuda_attention_bench --only $v --shape $shape $args --reps 5 2>/dev/null | grep -vE '^(variant|#)')"
        done
      done
    done
  done
done | tee "$out/probe_rows.txt"
BENCHES=".pb_main .pb_rec4" SHAPES="128:4096:0 128:4096:1 128:8192:0 64:4096:0" INPUTS="gaussian q4" \
  ONLY="baseline gproj-fb" ROUNDS=3 OUT="$out/ab" timeout 240 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s"
grep -vE '^#' "$out"/ab/ab.txt | sort -k2,2n -k3,3n -k4,4 -k9,9 -k1,1 -k11,11 | awk '{print $1,$2,$3,$4,$5,$6,$9,$10,$11}'
tar czf "$OUT/r1.tgz" -C "$OUT" r1 && rm -rf "$out"
