#!/usr/bin/env bash
# Session 32 run 3: run 2 found every CTA of gproj-fb's main kernel ~1.6% slower right after the delta preprocess
# (all waves, not only the first; the CTA-to-SM mapping is random either way), and a 1-CTA kernel that does
# nothing between them enough to avoid it. Is it the SM clock? The trace build (.pb_trace2) adds each CTA's
# clock64 cycles and thread 0's own span in ns: cycles / ns = the SM clock over that CTA. Then nvidia-smi's clock,
# power and clock-event reasons sampled every 20 ms beside a loop of gproj-fb backwards, without and with the gap.
#   (run from the repository root; carry .prebuilt (debs), .pb_trace2)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r3"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.applications.graphics,power.limit --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/t && tar xJf .pb_trace2/pack.tar.xz -C /tmp/t
T=/tmp/t/bin/cuda_attention_bench
for cfg in "gproj-fb none" "gproj-fb 1:0" "gproj none" "baseline none" "baseline 1:0" "gproj-fb none" "gproj-fb 1:0"; do
  set -- $cfg
  if [ "$2" = none ]; then unset GPROJ_PROBE_GAP; else export GPROJ_PROBE_GAP=$2; fi
  f="$out/trace_${1}_${2/:/x}.txt"; [ -f "$f" ] && f="${f%.txt}_b.txt"; rm -f "$f"
  GPROJ_PROBE_TRACE="$f" timeout 60 $T --only "$1" --shape 128:8192:0 --reps 3 > "$f.rows" 2>&1
  echo "trace $1 $2: rc=$? lines=$(wc -l < "$f")"
  unset GPROJ_PROBE_GAP
done
for gap in none 1:0 none 1:0; do
  if [ "$gap" = none ]; then unset GPROJ_PROBE_GAP; else export GPROJ_PROBE_GAP=$gap; fi
  f="$out/smi_${gap/:/x}.csv"; [ -f "$f" ] && f="${f%.csv}_b.csv"
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv -lms 20 > "$f" 2>&1 &
  smi=$!
  timeout 60 $T --only gproj-fb --shape 128:8192:0 --reps 60 > "$f.rows" 2>&1
  kill $smi; wait $smi 2>/dev/null
  echo "smi gap=$gap: $(grep -vE '^(variant|#)' "$f.rows" | head -1)"
  unset GPROJ_PROBE_GAP
done
echo "done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r3.tgz" -C "$OUT" r3 && rm -rf "$out"
