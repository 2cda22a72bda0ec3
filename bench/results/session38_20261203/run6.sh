#!/usr/bin/env bash
# Session 38 run 6 (H200): v3.45e (.ab_e, 32891af: v3.45d with gproj's D = 64 preprocess at carveout 100%) beside
# main's (.ab_c2, v3.45b) and v3.45d's (.ab_d) D = 64 rows, two rounds; the shared-memory configuration of gproj-fb's
# D = 64 preprocess and main kernel under v3.45e (ncu). (run from the repository root; carry .deps, .ab_c2, .ab_d, .ab_e)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0
out="$OUT/r6"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
BENCHES=".ab_c2 .ab_d .ab_e" SHAPES="64:4096:0" INPUTS="gaussian" ONLY="baseline gproj-fb" ROUNDS=2 OUT="$out/ab" \
  timeout 120 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
ab_summary "$out"/ab/ab.txt
m=gpu__time_duration.sum,launch__shared_mem_config_size,launch__occupancy_limit_shared_mem
for k in bwd_preprocess flash_bwd_wg; do
  timeout 60 ncu --cache-control none --clock-control none -k regex:$k --launch-skip 1 --launch-count 1 --metrics "$m" \
    --csv --page raw /tmp/ab_bench/32891af/cuda_attention_bench --only gproj-fb --shape 64:4096:0 --reps 1 \
    > "$out/ncu_$k.csv" 2>/dev/null
  echo "== ncu $k gproj-fb 64:4096:0 (v3.45e): rc=$? $(python3 -c '
import csv,sys
r=[x for x in csv.reader(open(sys.argv[1])) if x]; h=next((i for i,x in enumerate(r) if "Kernel Name" in x),None)
d=dict(zip(r[h],r[h+2])) if h is not None else {}
print(" ".join(k.split("__")[1].split(".")[0]+"="+d.get(k,"-") for k in sys.argv[2].split(",")))' "$out/ncu_$k.csv" "$m")"
done
tar czf "$OUT/r6.tgz" -C "$OUT" r6 && rm -rf "$out"
