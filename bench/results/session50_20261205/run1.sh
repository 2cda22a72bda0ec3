#!/usr/bin/env bash
# Session 50, run 1 (device tool; carry [".prebuilt", ".pb_s46-d64b", ".pb_s47-pre", ".pb_s47-dqearly",
# ".pb_s48-nort", ".pb_s49-next"], each .pb_X from `git checkout X && bash scripts/pack_candidate.sh .pb_X`):
# s49-next's checks (the C++ GPU suite, memcheck, the audit, fp16-lowrank's dQ / dK bounds) and the backward rows of
# the five builds side by side: s46-d64b (9cf9725, main's kernels), s47-pre (0b6bbb2), s47-dqearly (1a7f532),
# s48-nort (0fa8dee) and s49-next (0a74c8c, all of them with s48-fwdside and s49-fwdbasis).
CANDIDATE=.pb_s49-next BENCHES=".pb_s46-d64b .pb_s47-pre .pb_s47-dqearly .pb_s48-nort .pb_s49-next" \
  ONLY="baseline gproj-h16" SHAPES="128:4096:0 128:4096:1 128:8192:0 64:4096:0 64:4096:1" INPUTS=gaussian NCU=0 \
  bash scripts/device_candidate_ab.sh s50_next
