#!/usr/bin/env bash
# Kernel-level profile on the GPU machine: per-kernel durations (ncu, gpu__time_duration) of one backward of
# each projection configuration, a fuller ncu report (speed of light, occupancy, warp stalls) of the main
# forward and backward kernels, and the CUDA outputs of thresh-lowrank on a few stress cases (for a comparison
# with the CPU emulator on this machine). Needs .prebuilt for the commit (scripts/device_prebuild.sh).
# Device tool: `GPROJ_COMMIT=<commit> bash scripts/device_profile.sh`, carry [".gproj_commit", ".prebuilt"].
# PROFILE_INPUTS passes input options to the benchmark, e.g. "--q-scale 4" (trained-like rows) or "--sink".
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out/profile"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "device_profile: .prebuilt is not for $GPROJ_COMMIT; run scripts/device_prebuild.sh" >&2; exit 1; }
bench=.prebuilt/bin/cuda_attention_bench gproj_bin=.prebuilt/bin/gproj
shape="${PROFILE_SHAPE:-128:4096:0}"
read -r -a inputs <<<"${PROFILE_INPUTS:-}"
echo "gproj commit: $GPROJ_COMMIT; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); inputs: ${PROFILE_INPUTS:-Gaussian}" |
  tee "$out/profile/env.txt"

# Per-kernel time of each configuration (--reps 1: one warm-up and one timed call of forward and backward).
for label in ${PROFILE_LABELS:-baseline base-v1 gproj gproj-v1}; do
  timeout 120 ncu --metrics gpu__time_duration.sum --csv --print-units base "$bench" --only "$label" --shape "$shape" \
    --reps 1 "${inputs[@]}" >"$out/profile/times_$label.csv" 2>"$out/profile/times_$label.err"
  echo "== $label ($shape): rc=$?"
  python3 bench/ncu_times.py "$out/profile/times_$label.csv"  # each kernel's µs in the timed calls
done

# Fuller reports of the main kernels (one launch each; PROFILE_FULL=0 skips them; PROFILE_KERNELS lists
# KERNEL_REGEX:BENCH_LABEL pairs, e.g. "flash_bwd_wg_kernel:gproj" for the thresh-lowrank form of the default).
[ "${PROFILE_FULL:-1}" = 0 ] || for kl in ${PROFILE_KERNELS:-flash_fwd_wg_kernel:baseline flash_bwd_wg_kernel:baseline \
          flash_bwd_wg_kernel:gproj flash_bwd_tc_kernel:base-v1}; do
  k=${kl%%:*} label=${kl##*:}
  timeout 120 ncu -k "regex:$k" --launch-skip 1 --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis "$bench" --only "$label" --shape "$shape" --reps 1 "${inputs[@]}" \
    >"$out/profile/ncu_${k}_$label.txt" 2>&1
  echo "== ncu $k ($label): rc=$?"
  # PROFILE_SASS=1: also the full set, and the per-instruction source page (SASS with its stall samples).
  [ "${PROFILE_SASS:-0}" != 1 ] || ncu_source_page "$out/profile" "$bench" "$k" "$label" "$shape" "${inputs[@]}"
done

# CUDA outputs of the projections on a few stress cases, for a comparison with the CPU emulator on this machine
# (PROFILE_CASES=none skips them).
[ "${PROFILE_CASES:-}" = none ] || "$gproj_bin" stress --write /tmp/stress >/dev/null
[ "${PROFILE_CASES:-}" = none ] || for c in ${PROFILE_CASES:-shared-queries sink-ties-large ties-negative}; do
  for proj in thresh-lowrank pweighted; do
    "$gproj_bin" run --state "/tmp/stress/$c.safetensors" --device cuda --projection "$proj" \
      --out "$out/profile/${proj}_cuda_$c.safetensors" >/dev/null 2>&1
    echo "== $proj cuda outputs $c: rc=$?"
  done
done
( cd "$out" && tar czf profile.tgz profile && rm -rf profile )
