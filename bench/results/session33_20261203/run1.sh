#!/usr/bin/env bash
# Session 33 run 1: the carveout rule (session 32) elsewhere. Probe build .pb_guard (branch probe/guard, c105993 on
# main 6d09146; kernels as on main): GPROJ_PROBE_GUARD puts a do-nothing 1-CTA kernel at carveout 0% right before
# the forward kernel ("fwd"), the backward's main kernel ("main") or the dQ postprocess ("dq"), or one at 100%
# before the forward ("pre228": a stand-in for a GEMM in the largest configuration). Rows of baseline and gproj-fb
# (gproj with K's basis from the forward, the PyTorch op's path), and gproj (pre-passes in the backward) without a
# guard and with "main"; D = 128 and D = 64, two rounds.
#   (run from the repository root; carry .prebuilt (debs), .pb_guard)
set -u
cd "$(dirname "$0")/../../.."
export CUDA_VISIBLE_DEVICES=0 OMP_NUM_THREADS=16 OMP_WAIT_POLICY=passive
t0=$(date +%s)
out="$OUT/r1"; mkdir -p "$out"
source scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
mkdir -p /tmp/g && tar xJf .pb_guard/pack.tar.xz -C /tmp/g
B=/tmp/g/bin/cuda_attention_bench
row() {  # guard variant shape round
  if [ "$1" = none ]; then unset GPROJ_PROBE_GUARD; else export GPROJ_PROBE_GUARD=$1; fi
  echo "guard=$1 r$4 $(timeout 60 $B --only "$2" --shape "$3" --reps 5 2>/dev/null | grep -vE '^(variant|#)')"
  unset GPROJ_PROBE_GUARD
}
for r in 1 2; do
  for shape in 128:4096:0 128:4096:1 128:8192:0 64:4096:0; do
    for guard in none fwd pre228 pre228,fwd main dq; do
      for v in baseline gproj-fb; do row "$guard" "$v" "$shape" "$r"; done
    done
    for guard in none main; do row "$guard" gproj "$shape" "$r"; done
  done
  echo "round $r done at $(( $(date +%s) - t0 )) s" >&2
done | tee "$out/rows.txt"
echo "done at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/r1.tgz" -C "$OUT" r1 && rm -rf "$out"
