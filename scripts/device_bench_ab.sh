#!/usr/bin/env bash
# Several builds' cuda_attention_bench side by side on the same inputs, in one device command: for a bisect or an
# A/B of kernel versions (device_check.sh's COMPARE_BENCH compares one earlier build with this one).
#   BENCHES  directories, each with bench.tar.xz (cuda_attention_bench alone) or pack.tar.xz (.prebuilt) and COMMIT
#            (default ".prebuilt_alt_bench .prebuilt"); bench/README or device_check.sh say how to pack one
#   SHAPES   (default "128:4096:0 128:4096:1"), INPUTS (default "gaussian"; q4 = --q-scale 4, sink = --sink,
#            local = --local)
#   ONLY     the variants (default "baseline gproj"), ROUNDS (default 2: the builds in turn, then again)
#   NCU=1    also each build's per-kernel times of one backward without ncu's cache flush or clock lock, for the
#            variants in NCU_ONLY (default gproj), each shape and each input kind
#   NCU_LIMITS=1  also, for the same variants, shapes and inputs, one ncu report per build of the timed launch of
#            the kernel matching NCU_KERNEL (default flash_bwd_wg, the backward main kernel): issue, pipes, shared
#            memory, L2 and atomic throughput and the stall reasons, side by side (bench/ncu_limits.py)
#   ROUNDS=0 skips the bench rows (ncu only)
#   BENCH_ARGS  more arguments for every bench call of the rows (e.g. "--chain 8"; builds that predate one refuse it)
# Output: $OUT/ab.txt (rows tagged with inputs, round and commit), with NCU=1 $OUT/ab_ncu.txt, with NCU_LIMITS=1
# $OUT/ab_limits.txt and the reports in $OUT/limits/. A build that gives no rows (a shape or variant it does not
# run, a crash) is named on stderr with the last lines of its bench's stderr; a failed ncu run's last lines of
# stderr follow its header in ab_ncu.txt.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh

for kind in ${INPUTS:-gaussian}; do input_args "$kind" >/dev/null || exit 2; done  # before any work
bins=() commits=()
for d in ${BENCHES:-.prebuilt_alt_bench .prebuilt}; do
  [ -f "$d/COMMIT" ] || { echo "device_bench_ab: $d/COMMIT is missing" >&2; exit 2; }
  c=$(cat "$d/COMMIT") x="/tmp/ab_bench/$c"
  mkdir -p "$x"
  if [ -f "$d/bench.tar.xz" ]; then
    tar xJf "$d/bench.tar.xz" -C "$x" || exit 2
  elif [ -f "$d/pack.tar.xz" ]; then
    tar xJf "$d/pack.tar.xz" -C "$x" bin/cuda_attention_bench && mv "$x/bin/cuda_attention_bench" "$x/" || exit 2
  else
    echo "device_bench_ab: $d has neither bench.tar.xz nor pack.tar.xz" >&2
    exit 2
  fi
  [ -x "$x/cuda_attention_bench" ] || { echo "device_bench_ab: no cuda_attention_bench in $d" >&2; exit 2; }
  bins+=("$x/cuda_attention_bench") commits+=("$c")
done

echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); builds: ${commits[*]}" | tee "$out/ab.txt"
for shape in ${SHAPES:-128:4096:0 128:4096:1}; do
  for kind in ${INPUTS:-gaussian}; do
    args=$(input_args "$kind") || exit 2
    for round in $(seq 1 "${ROUNDS:-2}"); do
      for i in "${!bins[@]}"; do
        for v in ${ONLY:-baseline gproj}; do
          # shellcheck disable=SC2086
          rows=$(timeout 60 "${bins[$i]}" --only "$v" --shape "$shape" $args ${BENCH_ARGS:-} --reps 5 2>"$out/bench.err")
          rc=$?
          rows=$(grep -vE '^(variant|#)' <<<"$rows")
          if [ -n "$rows" ]; then
            sed "s/\$/  $kind  r$round  ${commits[$i]}/" <<<"$rows"
          else  # (a shape or variant the build does not know: say so, with the bench's own words)
            msg=$(tail -2 "$out/bench.err" | tr '\n' ' ')
            echo "device_bench_ab: no rows from ${commits[$i]} for $v $shape $kind (rc=$rc): $msg" >&2
          fi
        done
      done
    done
  done
done | tee -a "$out/ab.txt"

# Both ncu modes time without the cache flush or clock lock (a kernel finds in L2 what the one before it left).
warm_ncu=(ncu --cache-control none --clock-control none)
if [ "${NCU:-0}" = 1 ]; then
  for shape in ${SHAPES:-128:4096:0 128:4096:1}; do
    for kind in ${INPUTS:-gaussian}; do
      args=$(input_args "$kind") || exit 2
      for v in ${NCU_ONLY:-gproj}; do
        for i in "${!bins[@]}"; do
          csv="/tmp/ab_ncu_${i}_${v}_${shape//:/_}_$kind.csv"
          # shellcheck disable=SC2086
          timeout 120 "${warm_ncu[@]}" --metrics gpu__time_duration.sum --csv \
            --print-units base "${bins[$i]}" --only "$v" --shape "$shape" $args --reps 1 >"$csv" 2>"$csv.err"
          rc=$?
          echo "== $v $shape $kind ${commits[$i]} (ncu, warm caches): rc=$rc"
          [ "$rc" = 0 ] || tail -3 "$csv.err" | sed 's/^/  (stderr) /'
          python3 bench/ncu_times.py "$csv"
        done
      done
    done
  done | tee "$out/ab_ncu.txt"
fi

if [ "${NCU_LIMITS:-0}" = 1 ]; then
  mkdir -p "$out/limits"
  metrics='regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,smsp__inst_executed.sum'
  metrics+=',regex:^sm__pipe_(tensor|alu)_cycles_active\.avg\.pct_of_peak_sustained_(active|elapsed)$'
  metrics+=',regex:^smsp__issue_active\.avg\.pct_of_peak_sustained_active$'
  metrics+=',regex:^l1tex__data_pipe_lsu_wavefronts(_mem_shared)?\.(sum|avg\.pct_of_peak_sustained_elapsed)$'
  metrics+=',regex:^lts__t_(requests|sectors)_op_red\.sum$'
  for shape in ${SHAPES:-128:4096:0 128:4096:1}; do
    for kind in ${INPUTS:-gaussian}; do
      args=$(input_args "$kind") || exit 2
      reports=()
      for v in ${NCU_ONLY:-gproj}; do
        for i in "${!bins[@]}"; do
          # No "+" in the name (the commit's "+ablateN"): the device tool does not return such files.
          csv="$out/limits/${v}_${shape//:/_}_${kind}_${commits[$i]//+/_}.csv"
          # The second launch is the timed call (the bench runs each phase twice).
          # shellcheck disable=SC2086
          timeout 150 "${warm_ncu[@]}" -k "regex:${NCU_KERNEL:-flash_bwd_wg}" \
            --launch-skip 1 --launch-count 1 --section SpeedOfLight --metrics "$metrics" --csv --page raw \
            "${bins[$i]}" --only "$v" --shape "$shape" $args --reps 1 >"$csv" 2>"${csv%.csv}.err"
          echo "== $v $shape $kind ${commits[$i]} (ncu limits): rc=$?"
          reports+=("$csv")
        done
      done
      python3 bench/ncu_limits.py "${reports[@]}"
    done
  done | tee "$out/ab_limits.txt"
fi
