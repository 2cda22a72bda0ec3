#!/usr/bin/env bash
# Session 50, run 3 (device tool, on branch s50-final 819f2bf with .prebuilt from scripts/device_prebuild.sh;
# carry [".gproj_commit", ".prebuilt", ".pb_s48-nort"]; GPROJ_COMMIT=819f2bfc4b89): run 2's attention_bench put
# the op's fp16-lowrank backward overhead at +4.1% (4k) and +6.7% (8k) non-causal, against +1.1% to +2.3% for the
# same main kernel in run 1's cuda_attention_bench rows. (1) The kernels of the op's backward, baseline and gproj,
# from torch.profiler (op_profile.py); (2) s48-nort's and s50-final's cuda_attention_bench rows side by side at N =
# 8k non-causal only (the device budget left), with one backward's kernel times (NCU=1): the two builds' backward main
# kernels are the same SASS, their preprocess kernels are not (v3.45f/g). (0), first: attention_bench with the
# paired overhead (added after run 2), D = 128.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
install_prebuilt_extension
# (0) attention_bench with the paired overhead (alternating baseline's and gproj's backwards; fwdfix the control)
PYTHONPATH=python timeout 150 python3 bench/attention_bench.py --dims 128 --lengths 4096 8192 16384 --reps 10 \
  --warmup 3 --pairs 30 --out "$out/attention_bench_paired.json" >"$out/attention_bench_paired.txt" 2>&1
echo "attention_bench --pairs 30: rc=$?"
tail -12 "$out/attention_bench_paired.txt"
PYTHONPATH=python timeout 200 python3 bench/results/session50_20261205/op_profile.py >"$out/op_profile.txt" 2>&1
echo "op_profile: rc=$?"
grep "^== " "$out/op_profile.txt"
[ -n "${SKIP_AB:-}" ] && exit 0  # (SKIP_AB=1: (0) and (1) only, when the device budget is short)
BENCHES=".pb_s48-nort .prebuilt" ONLY="baseline gproj-h16" SHAPES="128:8192:0" \
  INPUTS=gaussian ROUNDS=2 NCU=1 NCU_ONLY="gproj-h16" bash scripts/device_bench_ab.sh >"$out/ab.log" 2>&1
echo "device_bench_ab: rc=$?"
