#!/usr/bin/env bash
# Session 46, run 1 (device tool; carry [".prebuilt", ".pb_s46-merge", ".ab_main", ".ab_s45-rtile", ".ab_s45-chunk",
# ".ab_s45-both"]: .prebuilt holds only debs/; .pb_s46-merge from `git checkout s46-merge && bash
# scripts/pack_candidate.sh .pb_s46-merge`, the .ab_* from `bash scripts/pack_bench.sh main s45-rtile s45-chunk
# s45-both`). s46-merge is s45-earlys (v3.2-h16c + v3.53 + v3.54) with s45-d64 (fp16-lowrank at D = 64) merged in.
# First fp16-lowrank's own checks on the merge: `gproj check` on the stress suite (dQ, dK <= 0.5%) and on the real
# states (<= 0.3%), and racecheck on its D = 64 and D = 128 small cases; then scripts/device_candidate_ab.sh: the
# whole C++ GPU suite, memcheck on the small cases, the audit, and the backward rows of the five builds side by side.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
bin=$(mktemp -d)
tar xJf .pb_s46-merge/pack.tar.xz -C "$bin" || { echo "run1: cannot unpack .pb_s46-merge" >&2; exit 2; }
g="$bin/bin/gproj"
timeout 60 "$g" check --suite stress --variants gproj --projection fp16-lowrank --device cuda --quiet \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check_fp16_stress.txt" 2>&1
echo "== gproj check fp16-lowrank (stress, cuda): rc=$?; $(tail -1 "$out/check_fp16_stress.txt")"
timeout 60 "$g" check --suite stress --cases real --variants gproj --projection fp16-lowrank --device cuda --quiet \
  --fail-above gproj:dq=0.003,gproj:dk=0.003 >"$out/check_fp16_real.txt" 2>&1
echo "== gproj check fp16-lowrank (real states, cuda): rc=$?; $(tail -1 "$out/check_fp16_real.txt")"
run_sanitizers "$out" "$bin/bin/cuda_tests" \
  'Awkward/CudaSweep.Fp16LowRankMatchesOracleAndCpu/q1_k97_*:Awkward/CudaSweep.Fp16LowRankMatchesOracleAndCpu/q200_k64_*:Awkward/CudaSweep.Fp16LowRankMatchesOracleAndCpu/q97_k97_h2x2_d128*' \
  racecheck
rm -rf "$bin"
CANDIDATE=.pb_s46-merge BENCHES=".ab_main .ab_s45-rtile .ab_s45-chunk .ab_s45-both .pb_s46-merge" \
  ONLY="baseline gproj-h16 gproj" SHAPES="128:4096:0 128:4096:1 128:8192:0 128:16384:1 64:4096:0" INPUTS=gaussian \
  NCU=0 bash scripts/device_candidate_ab.sh s46_r1
