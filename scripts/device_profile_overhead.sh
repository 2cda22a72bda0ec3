#!/usr/bin/env bash
# Where GProj's backward overhead goes, in one device command (about 4 minutes with .prebuilt): per-kernel ncu
# times of one backward of `baseline` and `gproj` for each shape and input kind below, a table of the two side by
# side (extra µs per kernel), and with SASS=1 (default) the per-instruction stall samples of the main backward
# kernel of both and of gproj's dQ correction on Gaussian inputs (ncu_source_page in scripts/device_env.sh).
# Device tool: `GPROJ_COMMIT=<commit> bash scripts/device_profile_overhead.sh`, carry [".gproj_commit", ".prebuilt"].
#   SHAPES  (default "128:4096:0 128:4096:1 64:1024:1"; D:N:causal, the last the training testbed's)
#   INPUTS  (default "gaussian q4"; q4 = --q-scale 4, sink = --sink, local = --local)
#   SASS_INPUT, SASS_SHAPE: the inputs and shape of the source pages (default gaussian, 128:4096:0; q4 is closer to
#     trained attention, whose rows list ~3 entries)
#   NCU_WARM=1: the times without ncu's cache flush and clock lock (--cache-control none --clock-control none), so
#     that a latency-bound kernel finds in L2 what the kernel before it left there, as in a real run (session 8:
#     under the default flush thresh_dkv_causal_kernel read 668 µs while the whole backward was as fast as before)
# Output: $OUT/overhead.txt (the tables) and $OUT/overhead.tgz (the CSVs and reports).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out="${OUT:-/tmp/gproj-out}"
work="$out/overhead"
mkdir -p "$work"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "device_profile_overhead: .prebuilt is not for $GPROJ_COMMIT; run scripts/device_prebuild.sh" >&2; exit 2; }
bench=.prebuilt/bin/cuda_attention_bench
echo "gproj commit: $GPROJ_COMMIT; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)" |
  tee "$work/env.txt"

warm=""
[ "${NCU_WARM:-0}" = 1 ] && warm="--cache-control none --clock-control none"
for shape in ${SHAPES:-128:4096:0 128:4096:1 64:1024:1}; do
  for kind in ${INPUTS:-gaussian q4}; do
    args=$(input_args "$kind") || exit 2
    for label in baseline gproj; do
      # shellcheck disable=SC2086
      timeout 120 ncu $warm --metrics gpu__time_duration.sum --csv --print-units base "$bench" --only "$label" \
        --shape "$shape" --reps 1 $args >"$work/times_${shape//:/_}_${kind}_$label.csv" 2>/dev/null
      echo "== $shape $kind $label: rc=$?"
    done
  done
done

if [ "${SASS:-1}" = 1 ]; then
  sass_args=$(input_args "${SASS_INPUT:-gaussian}") || exit 2
  for kl in flash_bwd_wg_kernel:baseline flash_bwd_wg_kernel:gproj thresh_dq_kernel:gproj; do
    # shellcheck disable=SC2086
    ncu_source_page "$work" "$bench" "${kl%%:*}" "${kl##*:}" "${SASS_SHAPE:-128:4096:0}" $sass_args
  done
fi

# The table: per shape and input kind, each backward kernel's time for baseline and gproj, and gproj's extra.
python3 bench/ncu_times.py --compare "$work" | tee "$out/overhead.txt"
( cd "$out" && tar czf overhead.tgz overhead && rm -rf overhead )
ls -la "$out"
