#!/usr/bin/env bash
# Session 32 run 2: run 1 found that a 3 µs gap is enough (gproj-fb's main kernel right after the delta preprocess
# loses ~150 µs at N = 8k; not under ncu). (a) Rows (.pb_gap, 447066e): does a gap kernel that does nothing
# (1 CTA, 0 µs; 132 CTAs, 0 µs) do it, does baseline gain from one, and the same at N = 4k. (b) A trace build
# (.pb_trace, branch probe/gap: GPROJ_PROBE_TRACE writes the main kernel's per-CTA start, end and SM and the
# preprocess's end): gproj-fb without and with the 1-CTA gap, gproj and baseline, at N = 8k.
#   (run from the repository root; carry .prebuilt (debs), .pb_gap, .pb_trace)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r2"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/g /tmp/t && tar xJf .pb_gap/pack.tar.xz -C /tmp/g && tar xJf .pb_trace/pack.tar.xz -C /tmp/t
G=/tmp/g/bin/cuda_attention_bench T=/tmp/t/bin/cuda_attention_bench
row() {  # row GAP VARIANT SHAPE BIN
  if [ "$1" = none ]; then unset GPROJ_PROBE_GAP; else export GPROJ_PROBE_GAP=$1; fi
  echo "gap=$1 $(timeout 60 "$4" --only "$2" --shape "$3" --reps 5 2>/dev/null | grep -vE '^(variant|#)')"
  unset GPROJ_PROBE_GAP
}
for r in 1 2; do
  for shape in 128:8192:0 128:4096:0; do
    for gap in none 1:0 132:0 1:3; do
      for v in baseline gproj gproj-fb; do row "$gap" "$v" "$shape" "$G"; done
    done
  done
done | tee "$out/gap_rows.txt"
echo "rows done at $(( $(date +%s) - t0 )) s"
for cfg in "gproj-fb none" "gproj-fb 1:0" "gproj none" "baseline none" "gproj-fb 1:3"; do
  set -- $cfg
  if [ "$2" = none ]; then unset GPROJ_PROBE_GAP; else export GPROJ_PROBE_GAP=$2; fi
  f="$out/trace_${1}_${2/:/x}.txt"; rm -f "$f"
  GPROJ_PROBE_TRACE="$f" timeout 60 $T --only "$1" --shape 128:8192:0 --reps 2 > "$f.rows" 2>&1
  echo "trace $1 $2: rc=$? $(grep -vE '^(variant|#)' "$f.rows" | head -1) lines=$(wc -l < "$f")"
  unset GPROJ_PROBE_GAP
done
echo "done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r2.tgz" -C "$OUT" r2 && rm -rf "$out"
