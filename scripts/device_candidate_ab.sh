#!/usr/bin/env bash
# One device command for a kernel candidate against a reference build (what session 39's runs 2-4 did, each
# written out as its own script): the candidate's GPU tests, compute-sanitizer memcheck on the small cases and the
# audit with gproj's dQ / dK bound of 0.5% (and fp16-lowrank's own, fp16_lowrank_checks); then both builds'
# cuda_attention_bench rows side by side (scripts/device_bench_ab.sh), the rows per round (ab_summary), each build's backward overhead over baseline's per
# round (ab_overhead, for each variant of ONLY but baseline) and, with NCU=1, one backward's kernel times. Device
# tool, from the repository root:
#   CANDIDATE=.pb_x REFERENCE=.ab_y bash scripts/device_candidate_ab.sh NAME
# carrying .deps, CANDIDATE and REFERENCE. CANDIDATE holds pack.tar.xz (bin/cuda_tests, bin/gproj,
# bin/cuda_attention_bench; stripped) and COMMIT (scripts/pack_candidate.sh); REFERENCE a bench.tar.xz
# (scripts/pack_bench.sh) or pack.tar.xz, and COMMIT.
# BENCHES (optional) replaces "REFERENCE CANDIDATE" as the builds of the rows: several packed builds side by side
# (scripts/pack_bench.sh), e.g. main and a few branches, while the checks run on CANDIDATE alone; REFERENCE may
# then be left out.
# SHAPES, INPUTS, ONLY, ROUNDS, NCU, NCU_ONLY pass on to device_bench_ab.sh (defaults here: D = 128 and 64 at
# N = 4k, Gaussian and q x 4 rows, baseline and gproj-fb, two rounds, NCU=1 for gproj-fb). Everything goes to
# $OUT/NAME and then $OUT/NAME.tgz. Exit status: 0 when the candidate's checks passed, 1 when one failed, 2 for a
# usage or setup error (the rows still run after a failed check: they say what it would cost).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
usage="usage: CANDIDATE=<pack dir> REFERENCE=<bench or pack dir> [BENCHES='<dir> ...'] $0 NAME"
[ $# -eq 1 ] || { echo "$usage" >&2; exit 2; }
name=$1
[[ "$name" =~ ^[A-Za-z0-9_.-]+$ ]] ||
  { echo "device_candidate_ab: NAME '$name' must be a plain file name" >&2; exit 2; }
cand=${CANDIDATE:-} ref=${REFERENCE:-}
[ -n "$cand" ] && { [ -n "$ref" ] || [ -n "${BENCHES:-}" ]; } || { echo "$usage" >&2; exit 2; }
benches=${BENCHES:-$ref $cand}
for f in "$cand/pack.tar.xz" "$cand/COMMIT"; do
  [ -f "$f" ] || { echo "device_candidate_ab: $f is missing (carry $cand)" >&2; exit 2; }
done
for d in $benches; do
  [ -f "$d/COMMIT" ] || { echo "device_candidate_ab: $d/COMMIT is missing (carry $d)" >&2; exit 2; }
  [ -f "$d/bench.tar.xz" ] || [ -f "$d/pack.tar.xz" ] ||
    { echo "device_candidate_ab: $d has neither bench.tar.xz nor pack.tar.xz" >&2; exit 2; }
done
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-16}" OMP_WAIT_POLICY=passive
out="${OUT:-/tmp/gproj-out}/$name"
mkdir -p "$out" || exit 2
source scripts/device_env.sh
t0=$(date +%s)
commit=$(cat "$cand/COMMIT")
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/env.txt" 2>&1
bin=$(mktemp -d)
tar xJf "$cand/pack.tar.xz" -C "$bin" || { echo "device_candidate_ab: cannot unpack $cand/pack.tar.xz" >&2; exit 2; }
failed=0
timeout 150 "$bin/bin/cuda_tests" >"$out/cuda_tests.log" 2>&1
rc=$?
[ $rc -eq 0 ] || failed=1
echo "cuda_tests ($commit): rc=$rc $(python3 scripts/gtest_triage.py "$out/cuda_tests.log")" \
  "at $(( $(date +%s) - t0 )) s"
run_sanitizers "$out" "$bin/bin/cuda_tests" "$small_cases" memcheck || failed=1
timeout 100 "$bin/bin/gproj" check --suite stress --device all --quiet --json "$out/check.json" \
  --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$out/check.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || failed=1
echo "gproj check --device all ($commit): rc=$rc at $(( $(date +%s) - t0 )) s; $(tail -1 "$out/check.txt")"
fp16_lowrank_checks "$bin/bin/gproj" "$out" || failed=1
only=${ONLY:-baseline gproj-fb}
BENCHES="$benches" SHAPES="${SHAPES:-128:4096:0 128:4096:1 64:4096:0}" INPUTS="${INPUTS:-gaussian q4}" \
  ONLY="$only" ROUNDS="${ROUNDS:-2}" NCU="${NCU:-1}" NCU_ONLY="${NCU_ONLY:-gproj-fb}" \
  OUT="$out/ab" timeout 420 bash scripts/device_bench_ab.sh > "$out/ab.log" 2>&1
rc=$?
echo "rows done at $(( $(date +%s) - t0 )) s (rc=$rc)"
[ $rc -eq 0 ] || tail -5 "$out/ab.log"
ab_summary "$out/ab/ab.txt"
for v in $only; do [ "$v" = baseline ] || AB_VARIANT=$v ab_overhead "$out/ab/ab.txt"; done
[ -f "$out/ab/ab_ncu.txt" ] && grep -E "^==|flash_bwd_wg|thresh_dq|thresh_dkv|bwd_postprocess|bwd_preprocess" "$out/ab/ab_ncu.txt"
rm -rf "$bin"
tar czf "$out.tgz" -C "$(dirname "$out")" "$name" && rm -rf "$out"
exit $failed
