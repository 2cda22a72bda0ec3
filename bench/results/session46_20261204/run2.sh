#!/usr/bin/env bash
# Session 46, run 2 (device tool; carry [".prebuilt", ".pb_s46-d64", ".ab_main", ".ab_s45-rtile"]: .prebuilt holds
# only debs/; .pb_s46-d64 from `git checkout s46-d64 && bash scripts/pack_candidate.sh .pb_s46-d64`, the .ab_* from
# `bash scripts/pack_bench.sh main s45-rtile`). s46-d64 is main + s45-rtile (v3.2-h16c) + s45-d64 (fp16-lowrank at
# D = 64), without v3.53 / v3.54 (run 1: slower). fp16-lowrank's checks on it (the stress suite's dQ, dK <= 0.5%,
# the real states' <= 0.3%; racecheck on its small cases at D = 64 and 128), then scripts/device_candidate_ab.sh:
# the whole C++ GPU suite, memcheck, the audit, and the backward rows of main, s45-rtile and s46-d64 at D = 128 and
# D = 64.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
bin=$(mktemp -d)
tar xJf .pb_s46-d64/pack.tar.xz -C "$bin" || { echo "run2: cannot unpack .pb_s46-d64" >&2; exit 2; }
g="$bin/bin/gproj"
timeout 60 "$g" check --suite stress --variants gproj --projection fp16-lowrank --device cuda --quiet \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_fp16_stress.txt" 2>&1
echo "== gproj check fp16-lowrank (stress, cuda): rc=$?; $(tail -1 "$out/check_fp16_stress.txt")"
timeout 60 "$g" check --suite stress --cases real --variants gproj --projection fp16-lowrank --device cuda --quiet \
  --fail-above gproj:dq=0.003,gproj:dk=0.003 >"$out/check_fp16_real.txt" 2>&1
echo "== gproj check fp16-lowrank (real states, cuda): rc=$?; $(tail -1 "$out/check_fp16_real.txt")"
run_sanitizers "$out" "$bin/bin/cuda_tests" \
  'Awkward/CudaSweep.Fp16LowRankMatchesOracleAndCpu/q1_k97_*:Awkward/CudaSweep.Fp16LowRankMatchesOracleAndCpu/q200_k64_*:Awkward/CudaSweep.Fp16LowRankMatchesOracleAndCpu/q97_k97_h2x2_d128*' \
  racecheck synccheck
rm -rf "$bin"
CANDIDATE=.pb_s46-d64 BENCHES=".ab_main .ab_s45-rtile .pb_s46-d64" ONLY="baseline gproj-h16" \
  SHAPES="128:4096:0 128:4096:1 128:8192:0 128:8192:1 128:16384:0 128:16384:1 64:4096:0 64:4096:1 64:8192:0" \
  INPUTS=gaussian NCU=0 bash scripts/device_candidate_ab.sh s46_r2
