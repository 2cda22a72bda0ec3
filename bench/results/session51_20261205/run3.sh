#!/usr/bin/env bash
# Session 51, run 3 (device tool; carry [".gproj_commit", ".prebuilt", ".pb_s51-qabs"]: .prebuilt = main 44706f9
# from scripts/device_prebuild.sh, .pb_s51-qabs from `git checkout s51-qabs && bash scripts/pack_candidate.sh
# .pb_s51-qabs`): (1) run 2's forward profile of the op (fwd_profile.py, main's extension); (2) s51-qabs's checks
# (the C++ GPU suite, memcheck, the audit, fp16-lowrank's bounds) and its rows against main's, three rounds:
# fp16-lowrank's forward with q's absmax beside its kernel instead of before it.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
GPROJ_COMMIT=44706f9dc5bd bash bench/results/session51_20261205/run2.sh >"$out/run2.log" 2>&1
echo "run2: rc=$?"
grep "^== \|^fwd_profile" "$out/run2.log"
CANDIDATE=.pb_s51-qabs BENCHES=".prebuilt .pb_s51-qabs" ONLY="baseline gproj gproj-h16" \
  SHAPES="128:4096:0 128:4096:1 128:8192:1 64:4096:1" INPUTS=gaussian ROUNDS=3 NCU=0 \
  bash scripts/device_candidate_ab.sh s51_qabs >"$out/ab.log" 2>&1
echo "device_candidate_ab: rc=$?"
tail -60 "$out/ab.log"
