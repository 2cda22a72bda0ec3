#!/usr/bin/env bash
# Session 44, run 9 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at the commit
# README.md lists): the PyTorch op with projection fp16-lowrank on CUDA tensors (run 10: after run 9 its forward
# returns no FP32 O there, which the wgmma forward never writes, and every word of its statistics defined): the whole
# tests/python/test_attention.py (CUDA included) with the prebuilt extension.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "run9: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
install_prebuilt_extension
PYTHONPATH=python timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_attention.py >"$out/pytest.log" 2>&1
echo "== pytest: rc=$?"
grep -E "passed|failed|FAILED|Error|assert" "$out/pytest.log" | tail -15
