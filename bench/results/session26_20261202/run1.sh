#!/usr/bin/env bash
# Session 26 run 1, on the prebuilt cf4a62a: the GPU check (the two new GPU tests, memcheck on the workspace sized
# for the tensors), then the PyTorch op's backward peak memory and speed with main's extension (cdf8735, the full
# workspace) and with this one's (the workspace sized for the tensors) in turn, the same attention_bench.py.
set -uo pipefail
out=${OUT:-/tmp/out}
GPROJ_COMMIT=$(cat .gproj_commit) bash scripts/device_check.sh
mkdir -p "$out/memory"
for round in 1; do
  for which in old new; do
    script=bench/attention_bench.py
    [ "$which" = old ] && script=.ab_s26/old/bench/attention_bench.py
    timeout 100 python3 "$script" --dims 128 64 --lengths 4096 16384 --reps 10 --warmup 3 \
      --out "$out/memory/${which}_r$round.json" >"$out/memory/${which}_r$round.txt" 2>&1
    echo "== $which round $round: rc=$?"
    cat "$out/memory/${which}_r$round.txt"
  done
done
