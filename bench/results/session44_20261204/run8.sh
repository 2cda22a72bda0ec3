#!/usr/bin/env bash
# Session 44, run 8 (device tool; carry [".gproj_commit", ".prebuilt"] from scripts/device_prebuild.sh at the commit
# README.md lists): compute-sanitizer memcheck, racecheck and synccheck on fp16-lowrank's small backward case (both
# forms, so also the kernels of 1/l on dO's side: h16_dout_max_kernel, the preprocess's second pass, kDoS) and its
# forward and conversion tests.
set -uo pipefail
out="${OUT:-/tmp/gproj-out}"
mkdir -p "$out"
source scripts/device_env.sh
[ -n "$prebuilt" ] || { echo "run8: .prebuilt is not for $GPROJ_COMMIT" >&2; exit 1; }
filter='Awkward/CudaSweep.Fp16LowRankMatchesOracleAndCpu/q97_k97_h2x2_d128*:ConvertFp16.ScalesAndEveryElementMatchTheCpu:'
filter+='Fp16LowRankForward.HeadsFarApartInScale'
run_sanitizers "$out" .prebuilt/bin/cuda_tests "$filter" memcheck racecheck synccheck
echo "== sanitizers: rc=$?"
for t in memcheck racecheck synccheck; do grep -E "PASSED|FAILED|SUMMARY" "$out/sanitizer_$t.log" | tail -3; done
