#!/usr/bin/env bash
# Where GProj's backward overhead goes, in one device command (about 4 minutes with .prebuilt): per-kernel ncu
# times of one backward of `baseline` and `gproj` for each shape and input kind below, a table of the two side by
# side (extra µs per kernel), and with SASS=1 (default) the per-instruction stall samples of the main backward
# kernel of both and of gproj's dQ correction on Gaussian inputs (bench/ncu_stall_top.py reads them).
# Device tool: `GPROJ_COMMIT=<commit> bash scripts/device_profile_overhead.sh`, carry [".gproj_commit", ".prebuilt"].
#   SHAPES  (default "128:4096:0 128:4096:1 64:1024:1"; D:N:causal, the last the training testbed's)
#   INPUTS  (default "gaussian q4"; q4 = --q-scale 4, sink = --sink)
# Output: $OUT/overhead.txt (the tables) and $OUT/overhead.tgz (the CSVs and reports).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/gproj-out}"
work="$out/overhead"
mkdir -p "$work"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "device_profile_overhead: .prebuilt is not for $GPROJ_COMMIT; run scripts/device_prebuild.sh" >&2; exit 2; }
bench=.prebuilt/bin/cuda_attention_bench
echo "gproj commit: $GPROJ_COMMIT; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)" |
  tee "$work/env.txt"

input_args() {  # gaussian | q4 | sink
  case "$1" in
    gaussian) echo "" ;;
    q4) echo "--q-scale 4" ;;
    sink) echo "--sink" ;;
    *) echo "device_profile_overhead: unknown input kind $1" >&2; return 2 ;;
  esac
}

for shape in ${SHAPES:-128:4096:0 128:4096:1 64:1024:1}; do
  for kind in ${INPUTS:-gaussian q4}; do
    args=$(input_args "$kind") || exit 2
    for label in baseline gproj; do
      # shellcheck disable=SC2086
      timeout 120 ncu --metrics gpu__time_duration.sum --csv --print-units base "$bench" --only "$label" \
        --shape "$shape" --reps 1 $args >"$work/times_${shape//:/_}_${kind}_$label.csv" 2>/dev/null
      echo "== $shape $kind $label: rc=$?"
    done
  done
done

if [ "${SASS:-1}" = 1 ]; then
  for kl in flash_bwd_wg_kernel:baseline flash_bwd_wg_kernel:gproj thresh_dq_kernel:gproj; do
    k=${kl%%:*} label=${kl##*:} rep="$work/rep_${k}_$label"
    timeout 200 ncu -k "regex:$k" --launch-skip 1 --launch-count 1 --set full -f -o "$rep" "$bench" --only "$label" \
      --shape 128:4096:0 --reps 1 >"$rep.log" 2>&1
    echo "== ncu --set full $k ($label, Gaussian, 128:4096:0): rc=$?"
    ncu -i "$rep.ncu-rep" --page source --print-source sass --csv >"$work/sass_${k}_$label.csv" 2>&1
    python3 bench/ncu_stall_top.py "$work/sass_${k}_$label.csv" 40 >"$work/stall_top_${k}_$label.txt" 2>&1
    rm -f "$rep.ncu-rep"
  done
fi

# The table: per shape and input kind, each kernel's time (second half of the calls: the timed forward and
# backward) for baseline and gproj, and gproj's extra.
python3 - "$work" <<'PY' | tee "$out/overhead.txt"
import collections, csv, glob, os, sys
work = sys.argv[1]
def times(path):
    rows = [r for r in csv.reader(open(path)) if len(r) > 10] if os.path.exists(path) else []
    if not rows:
        return None
    head, body = rows[0], rows[1:]
    kn, mv = head.index("Kernel Name"), head.index("Metric Value")
    # by name without template arguments, so that the two variants' instances of a kernel share a row
    calls = [(r[kn].split("(")[0].split("<")[0].replace("void ", ""), float(r[mv].replace(",", "")) / 1e3) for r in body]
    tot = collections.OrderedDict()
    for name, us in calls[len(calls) // 2:]:
        if "fwd" in name:
            continue  # the backward only
        tot[name] = tot.get(name, 0.0) + us
    return tot
for path in sorted(glob.glob(os.path.join(work, "times_*_baseline.csv"))):
    key = os.path.basename(path)[len("times_"):-len("_baseline.csv")]
    base, gp = times(path), times(path.replace("_baseline.csv", "_gproj.csv"))
    print(f"\n## {key} (ncu µs, backward kernels)")
    if base is None or gp is None:
        print("  (no ncu rows: see the CSVs)")
        continue
    print(f"  {'kernel':58s} {'baseline':>9s} {'gproj':>9s} {'extra':>9s}")
    for name in list(dict.fromkeys(list(base) + list(gp))):
        b, g = base.get(name, 0.0), gp.get(name, 0.0)
        print(f"  {name[:58]:58s} {b:9.1f} {g:9.1f} {g - b:+9.1f}")
    tb, tg = sum(base.values()), sum(gp.values())
    print(f"  {'total (serialised under ncu)':58s} {tb:9.1f} {tg:9.1f} {tg - tb:+9.1f} ({100 * (tg / tb - 1):+.1f}%)")
PY
( cd "$out" && tar czf overhead.tgz overhead && rm -rf overhead )
ls -la "$out"
