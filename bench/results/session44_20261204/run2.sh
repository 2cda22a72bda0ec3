#!/usr/bin/env bash
# Session 44, run 2 (device tool; carry [".ab_HEAD", ".ab_HEAD_ablate3", ".ab_HEAD_ablate4", ".ab_HEAD_ablate7"] from
# `ABLATE=N bash scripts/pack_bench.sh HEAD` for N = 0, 3, 4, 7 at the commits README.md lists): what fp16-lowrank's
# element-wise parts cost in its backward main kernel (GPROJ_ABLATE bits with kH16, src/cuda/flash_bwd_wg.cuh),
# side by side with baseline, and ncu's per-kernel times of each build.
set -uo pipefail
BENCHES=".ab_HEAD .ab_HEAD_ablate3 .ab_HEAD_ablate4 .ab_HEAD_ablate7" SHAPES="128:4096:0 128:4096:1 128:8192:0" \
  ONLY="baseline gproj-h16" ROUNDS=2 NCU=1 NCU_ONLY=gproj-h16 bash scripts/device_bench_ab.sh
