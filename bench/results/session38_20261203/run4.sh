#!/usr/bin/env bash
# Session 38 run 4 (H200): why the delta preprocess is not at DRAM speed. ncu metrics of the preprocess alone (the
# timed backward's launch) for main d1e83d4 (.ab_main: shared memory, rows (b, h, i)), v3.45b (.ab_c2: registers,
# lane pairs, memory order; = main c1c40bf's kernel) and v3.45c (.ab_s38-pre-smem: shared memory, memory order),
# baseline and gproj-fb at D = 128, N = 4k: L1 requests and sectors of its global loads, L2 read requests and
# sectors, DRAM bytes and throughput, occupancy and its shared-memory limit, the carveout the driver chose, the
# long-scoreboard stall. (run from the repository root; carry .deps, .ab_main, .ab_c2, .ab_s38-pre-smem)
set -u
cd "$(dirname "$0")/../../.."
out="$OUT/r4"; mkdir -p "$out"
source scripts/device_env.sh
export CUDA_VISIBLE_DEVICES=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
m=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
m+=,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
m+=,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read.sum
m+=,sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers
m+=,launch__shared_mem_config_size,launch__registers_per_thread,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
m+=,smsp__inst_executed.sum
for d in .ab_main .ab_c2 .ab_s38-pre-smem; do
  c=$(cat $d/COMMIT) x=/tmp/r4/$c; mkdir -p $x
  if [ -f $d/bench.tar.xz ]; then tar xJf $d/bench.tar.xz -C $x; else tar xJf $d/pack.tar.xz -C $x bin/cuda_attention_bench && mv $x/bin/cuda_attention_bench $x/; fi
  for v in baseline gproj-fb; do
    timeout 100 ncu --cache-control none --clock-control none -k regex:bwd_preprocess --launch-skip 1 --launch-count 1 \
      --metrics "$m" --csv --page raw $x/cuda_attention_bench --only $v --shape 128:4096:0 --reps 1 > "$out/${v}_$c.csv" 2> "$out/${v}_$c.err"
    echo "== $v $c: rc=$?"
    python3 - "$out/${v}_$c.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
hdr = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if hdr is None: print("  no kernel row"); sys.exit(0)
names, units, vals = rows[hdr], rows[hdr + 1], rows[hdr + 2]
for n, u, v in zip(names, units, vals):
    if "__" in n: print(f"  {n:75s} {v:>14s} {u}")
PY
  done
done
tar czf "$OUT/r4.tgz" -C "$OUT" r4 && rm -rf "$out"
