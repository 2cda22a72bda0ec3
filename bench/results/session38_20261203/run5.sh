#!/usr/bin/env bash
# Session 38 run 5 (H200): v3.45d (.pb_d, branch s38-pre-d: v3.45c's shared-memory preprocess, gproj's D = 128 launch
# at carveout 85%): its GPU tests, memcheck on the small cases, the audit with the bars; rows beside main's
# (c1c40bf's kernels = v3.45b, .ab_c2, bench only), two rounds; the preprocess's ncu metrics (time, configuration,
# occupancy) for both variants at D = 128 and 64. (run from the repository root; carry .deps, .ab_c2, .pb_d)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r5"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/d && tar xJf .pb_d/pack.tar.xz -C /tmp/d
timeout 150 /tmp/d/bin/cuda_tests >"$out/cuda_tests_d.log" 2>&1
echo "cuda_tests v3.45d ($(cat .pb_d/COMMIT)): rc=$? $(python3 scripts/gtest_triage.py "$out/cuda_tests_d.log") at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" /tmp/d/bin/cuda_tests "$small_cases" memcheck
timeout 100 /tmp/d/bin/gproj check --suite stress --device all --quiet --json "$out/check_d.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_d.txt" 2>&1
echo "gproj check --device all (v3.45d): rc=$? at $(( $(date +%s) - t0 )) s"
tail -1 "$out/check_d.txt"
BENCHES=".ab_c2 .pb_d" SHAPES="128:4096:0 128:4096:1 64:4096:0" INPUTS="gaussian" \
  ONLY="baseline gproj-fb" ROUNDS=2 OUT="$out/ab" timeout 200 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
echo "rows done at $(( $(date +%s) - t0 )) s (rc=$?)"
ab_summary "$out"/ab/ab.txt
m=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__shared_mem_config_size
m+=,launch__occupancy_limit_shared_mem,sm__warps_active.avg.pct_of_peak_sustained_active
for shape in 128:4096:0 64:4096:0; do
  for v in baseline gproj-fb; do
    timeout 60 ncu --cache-control none --clock-control none -k regex:bwd_preprocess --launch-skip 1 --launch-count 1 \
      --metrics "$m" --csv --page raw /tmp/d/bin/cuda_attention_bench --only $v --shape $shape --reps 1 \
      > "$out/ncu_${v}_${shape//:/_}.csv" 2>/dev/null
    echo "== ncu preprocess $v $shape: rc=$? $(python3 -c '
import csv,sys
r=[x for x in csv.reader(open(sys.argv[1])) if x]; h=next((i for i,x in enumerate(r) if "Kernel Name" in x),None)
d=dict(zip(r[h],r[h+2])) if h is not None else {}
print(" ".join(k.split("__")[1].split(".")[0]+"="+d.get(k,"-") for k in sys.argv[2].split(",")))' "$out/ncu_${v}_${shape//:/_}.csv" "$m")"
  done
done
tar czf "$OUT/r5.tgz" -C "$OUT" r5 && rm -rf "$out"
