#!/usr/bin/env bash
# Session 51, run 4 (device tool; carry [".prebuilt", ".pb_s51-fwdq"]: .prebuilt = main 44706f9 from
# scripts/device_prebuild.sh, .pb_s51-fwdq from `git checkout s51-fwdq && bash scripts/pack_candidate.sh
# .pb_s51-fwdq`): s51-fwdq's checks (the C++ GPU suite, memcheck, the audit, fp16-lowrank's bounds) and its rows
# against main's, three rounds: v2.3-h16q, the forward kernel writing qh.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
CANDIDATE=.pb_s51-fwdq BENCHES=".prebuilt .pb_s51-fwdq" ONLY="baseline gproj-h16" \
  SHAPES="128:4096:0 128:4096:1 64:4096:1" INPUTS=gaussian ROUNDS=3 NCU=0 \
  bash scripts/device_candidate_ab.sh s51_fwdq >"$out/ab.log" 2>&1
echo "device_candidate_ab: rc=$?"
tail -40 "$out/ab.log"
