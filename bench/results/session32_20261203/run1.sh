#!/usr/bin/env bash
# Session 32 run 1: why gproj's main kernel is ~3% slower right after the delta preprocess (session 31 run 2).
# The probe build of session 31 (.pb_gap, branch probe/gap 447066e: gproj-fb runs no basis pre-passes in the
# backward; GPROJ_PROBE_GAP="ctas:us" puts a spin kernel before the main kernel). ncu in application replay (each
# pass reruns the whole bench, so every kernel finds the GPU as the one before it left it; no cache flush, no clock
# lock) for the SM clock, DRAM bytes and L2 hit rates of every backward kernel of baseline, gproj and gproj-fb at
# D = 128, N = 8k, with and without a 1-CTA 30 µs gap; then bench rows of gproj-fb with gaps of 3, 10, 30, 100 µs.
#   (run from the repository root; carry .prebuilt (debs), .pb_gap)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r1"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,power.limit,power.draw,temperature.gpu --format=csv > "$out/env.txt" 2>&1
ncu --version | tail -1 >> "$out/env.txt" 2>&1
mkdir -p /tmp/v && tar xJf .pb_gap/pack.tar.xz -C /tmp/v
B=/tmp/v/bin/cuda_attention_bench
safe="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum"
safe+=",lts__t_sector_hit_rate.pct,lts__t_sectors_op_red.sum"
more="$safe,dram__cycles_elapsed.avg.per_second,lts__t_sectors_op_red_lookup_miss.sum"
more+=",lts__t_sectors_op_read_lookup_miss.sum,lts__t_sectors_op_write_lookup_miss.sum,smsp__cycles_active.avg"
for cfg in "baseline none" "gproj none" "gproj-fb none" "gproj-fb 1:30" "gproj 1:30"; do
  set -- $cfg
  v=$1 gap=$2
  if [ "$gap" = none ]; then unset GPROJ_PROBE_GAP; else export GPROJ_PROBE_GAP=$gap; fi
  csv="$out/ncu_${v}_${gap/:/x}.csv"
  timeout 200 ncu --replay-mode application --cache-control none --clock-control none --metrics "$more" --csv \
    --print-units base $B --only "$v" --shape 128:8192:0 --reps 1 >"$csv" 2>"$csv.err"
  rc=$?
  if [ "$rc" != 0 ]; then
    echo "ncu $v $gap with the longer metric list: rc=$rc ($(tail -2 "$csv.err" | tr '\n' ' ')); the short list"
    timeout 200 ncu --replay-mode application --cache-control none --clock-control none --metrics "$safe" --csv \
      --print-units base $B --only "$v" --shape 128:8192:0 --reps 1 >"$csv" 2>"$csv.err"
    rc=$?
  fi
  echo "== ncu $v gap=$gap rc=$rc at $(( $(date +%s) - t0 )) s"
done
unset GPROJ_PROBE_GAP
for gap in none 1:3 1:10 1:30 1:100; do
  if [ "$gap" = none ]; then unset GPROJ_PROBE_GAP; else export GPROJ_PROBE_GAP=$gap; fi
  for r in 1 2; do
    for v in gproj gproj-fb; do
      echo "gap=$gap r$r $(timeout 60 $B --only $v --shape 128:8192:0 --reps 5 2>/dev/null | grep -vE '^(variant|#)')"
    done
  done
done | tee "$out/gap_rows.txt"
unset GPROJ_PROBE_GAP
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> "$out/env.txt" 2>&1
echo "done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r1.tgz" -C "$OUT" r1 && rm -rf "$out"
