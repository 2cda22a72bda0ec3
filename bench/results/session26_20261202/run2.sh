#!/usr/bin/env bash
# Session 26 run 2: the wgmma probe of this tree (built here, standalone), then ncu reports of the kernels after
# the main kernel (thresh_dq and the dK-only postprocess of gproj, the dQ postprocess of baseline) on the prebuilt
# cf4a62a (the same kernels as this tree).
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
nvcc -Isrc -Iinclude -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmma_probe \
  bench/probes/wgmma_probe.cu >"$out/probe_build.txt" 2>&1 && /tmp/wgmma_probe >"$out/wgmma_probe.txt" 2>&1
echo "== wgmma_probe: rc=$?"
cat "$out/wgmma_probe.txt"
GPROJ_COMMIT=$(cat .gproj_commit) PROFILE_LABELS="baseline gproj" PROFILE_CASES=none \
  PROFILE_KERNELS="thresh_dq_kernel:gproj bwd_postprocess_dkv_kernel:gproj bwd_postprocess_dq_kernel:baseline" \
  bash scripts/device_profile.sh
