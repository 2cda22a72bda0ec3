#!/usr/bin/env bash
# Session 44, run 12 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at the commit
# README.md lists): attention_bench.py at D = 128, N = 4k, 8k, 16k with the row gproj-fp16-lowrank (the torch op's
# fp16-lowrank CUDA path) beside baseline, fwdfix, gproj and SDPA's backends, on the same inputs.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "run12: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
install_prebuilt_extension
PYTHONPATH=python timeout 300 python3 bench/attention_bench.py --reps 10 --warmup 3 --dims 128 --lengths 4096 8192 16384 \
  --out "$out/attention_bench.json" >"$out/attention_bench.txt" 2>&1
echo "== attention_bench.py: rc=$?"
cat "$out/attention_bench.txt"
