# Sourced by scripts/device_check.sh and scripts/device_train.sh on the GPU machine: unpacks the carried Debian
# packages (.deps, from scripts/device_deps.sh) into $deps and puts them on the library path, names their
# OpenBLAS for setup.py, sets GPROJ_COMMIT (the command line's, else .gproj_commit), and sets `prebuilt` to 1
# when .prebuilt (scripts/device_prebuild.sh) was built for that commit.
deps=/tmp/gproj-deps
debs=.deps/debs
[ -d "$debs" ] || debs=.prebuilt/debs  # the runtime packages only (scripts/device_prebuild.sh)
if [ -d "$debs" ]; then
  # Once per machine: two scripts started side by side (a check on GPU 0, training on GPU 1) share the unpacked
  # tree instead of overwriting libraries the other has loaded.
  if [ ! -f "$deps/.unpacked" ]; then
    mkdir -p "$deps"
    for f in "$debs"/*.deb; do dpkg -x "$f" "$deps"; done
    touch "$deps/.unpacked"
  fi
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:$deps/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}"
fi
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
export GPROJ_OPENBLAS_INCLUDE="$deps/usr/include/x86_64-linux-gnu/openblas-pthread"
export GPROJ_OPENBLAS_LIBDIR="$deps/usr/lib/x86_64-linux-gnu/openblas-pthread"
export GPROJ_COMMIT="${GPROJ_COMMIT:-$(cat .gproj_commit 2>/dev/null || echo unknown)}"
# The real captured states of this copy of the tree: prebuilt binaries carry the path they were built at.
export GPROJ_DATA_DIR="${GPROJ_DATA_DIR:-$PWD/tests/data}"
# run_sanitizers LOG_DIR TEST_BIN FILTER TOOL...: compute-sanitizer TOOL on the GPU tests matching FILTER, one
# log per tool, and a `note` line (the caller's summary function, else stdout) each; returns 1 when any tool failed.
run_sanitizers() {
  local dir=$1 bin=$2 filter=$3 tool t0 rc failed=0
  shift 3
  for tool in "$@"; do
    t0=$(date +%s)
    timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" --gtest_filter="$filter" >"$dir/sanitizer_$tool.log" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] || failed=1
    local line="compute-sanitizer $tool: rc=$rc in $(( $(date +%s) - t0 )) s; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$dir/sanitizer_$tool.log" | tail -1)"
    if declare -F note >/dev/null; then note "$line"; else echo "== $line"; fi  # (a caller without `note`: stdout)
  done
  return "$failed"
}

# fp16-lowrank's own audit on CUDA (not among `gproj check`'s default variants): the stress suite with dQ, dK <= 0.5%
# and the real states with <= 0.3% (issue 4's bars). Writes DIR/check_fp16_stress.txt and DIR/check_fp16_real.txt,
# prints a line each; returns 1 when either fails. (Session 46's run scripts wrote this out each time.)
fp16_lowrank_checks() {
  local gproj_bin=$1 dir=$2 rc failed=0
  timeout 60 "$gproj_bin" check --suite stress --variants gproj --projection fp16-lowrank --device cuda --quiet \
    --fail-above gproj:dq=0.005,gproj:dk=0.005 >"$dir/check_fp16_stress.txt" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || failed=1
  echo "== gproj check fp16-lowrank (stress, cuda): rc=$rc; $(tail -1 "$dir/check_fp16_stress.txt")"
  timeout 60 "$gproj_bin" check --suite stress --cases real --variants gproj --projection fp16-lowrank --device cuda \
    --quiet --fail-above gproj:dq=0.003,gproj:dk=0.003 >"$dir/check_fp16_real.txt" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || failed=1
  echo "== gproj check fp16-lowrank (real states, cuda): rc=$rc; $(tail -1 "$dir/check_fp16_real.txt")"
  return "$failed"
}

# The small cases of every kernel path, for compute-sanitizer (device_check.sh, device_candidate_tests.sh): the
# default and wide backward, thresh-lowrank on v3.1 (D = 64) and v3.2 (D = 128: its in-kernel K U and the per-key
# dK table), (odd row count) pweighted and thresh-lowrank, and fp16-lowrank's conversion pass and backward (both
# forms: 1/l on P and on dO's side).
small_cases='Awkward/CudaSweep.*/q1_k97_h2x2_d64*:Awkward/CudaSweep.ThreshLowRankMatchesOracleAndCpu/q97_k97_h2x2_d128*:'
small_cases+='Awkward/CudaSweep.Fp16LowRankMatchesOracleAndCpu/q97_k97_h2x2_d128*:'
small_cases+='Cuda.OddRowCountKeepsTheWorkspaceAligned:Cuda.WorkspaceSizedForTheTensorsLeavesOutUnusedAccumulators:'
small_cases+='ConvertFp16.ScalesAndEveryElementMatchTheCpu:Fp16LowRankForward.HeadsFarApartInScale:'
# (Nk = 64 at D = 64: the second warpgroup has no keys and skips every block, session 46's synccheck finding)
small_cases+='Awkward/CudaSweep.EveryVariantMatchesOracleAndCpu/q200_k64_*:Awkward/CudaSweep.Fp16LowRankMatchesOracleAndCpu/q200_k64_*'

# The prebuilt extension into python/gproj by rename (a process beside this one may have the old file mapped).
install_prebuilt_extension() {
  local so=_C.cpython-312-x86_64-linux-gnu.so
  cmp -s ".prebuilt/$so" "python/gproj/$so" && return 0
  cp ".prebuilt/$so" "python/gproj/$so.tmp$$" && mv -f "python/gproj/$so.tmp$$" "python/gproj/$so"
}

prebuilt=""
if [ -f .prebuilt/COMMIT ] && [ "$(cat .prebuilt/COMMIT)" = "$GPROJ_COMMIT" ]; then
  prebuilt=1
  if [ -f .prebuilt/pack.tar.xz ] && [ ! -x .prebuilt/bin/cuda_tests ]; then tar xJf .prebuilt/pack.tar.xz -C .prebuilt; fi
fi

# ncu_source_page DIR BENCH KERNEL_REGEX LABEL SHAPE [INPUT_ARGS...]: the full ncu set of one launch of KERNEL in
# the benchmark's LABEL configuration, written as DIR/sass_KERNEL_LABEL.csv (the per-instruction source page with
# its stall samples), DIR/details_KERNEL_LABEL.txt and DIR/stall_top_KERNEL_LABEL.txt (bench/ncu_stall_top.py);
# the report itself is removed (the device tool brings back few files).
ncu_source_page() {
  local dir=$1 bench=$2 k=$3 label=$4 shape=$5
  shift 5
  local rep="$dir/rep_${k}_$label"
  timeout 200 ncu -k "regex:$k" --launch-skip 1 --launch-count 1 --set full -f -o "$rep" "$bench" --only "$label" \
    --shape "$shape" --reps 1 "$@" >"$rep.log" 2>&1
  echo "== ncu --set full $k ($label, $shape $*): rc=$?"
  ncu -i "$rep.ncu-rep" --page source --print-source sass --csv >"$dir/sass_${k}_$label.csv" 2>&1
  ncu -i "$rep.ncu-rep" --page details --print-details all >"$dir/details_${k}_$label.txt" 2>&1
  python3 bench/ncu_stall_top.py "$dir/sass_${k}_$label.csv" 40 >"$dir/stall_top_${k}_$label.txt" 2>&1
  rm -f "$rep.ncu-rep"
}

# input_args KIND: cuda_attention_bench's arguments for an input kind (gaussian | q4 | sink | local), or an error.
input_args() {
  case "$1" in
    gaussian) echo "" ;;
    q4) echo "--q-scale 4" ;;
    sink) echo "--sink" ;;
    local) echo "--local" ;;
    *) echo "unknown input kind $1 (gaussian, q4, sink or local)" >&2; return 2 ;;
  esac
}

# ab_summary FILE...: device_bench_ab.sh's rows (ab.txt) as one line per variant, D, causal, input kind and build,
# the forward's and then the backward's ms of every round in round order, the lines sorted: the summary the run
# scripts print last (bench/results/session*/runN.sh wrote it out as an awk pipeline each time, rounds in the
# order of their forward times).
ab_summary() {
  grep -hE '^(baseline|gproj|base-|fwdfix)' "$@" | awk '{print $1, $2, $3, $4, $9, $5, $6, $10, $11}' | sort -s -k8,8 |
    awk '{k=$1" "$3" "$4" "$5" "$9; f[k]=f[k]" "$6; s[k]=s[k]" "$7} END{for(k in s) print k, "fwd", f[k], "bwd", s[k]}' |
    sort
}

# ab_overhead FILE...: from the same rows, each build's backward overhead over baseline's, round by round: one line
# per N, D, causal, input kind and build (variant AB_VARIANT, default gproj-fb), "r1:+11.2% r2:+11.5%". The ratio of
# two rows timed in the same round, which is what the bar measures; baseline's own time moves by ~1% between
# builds whose kernels are the same (session 39, runs 3-4), more than most candidates change the overhead.
ab_overhead() {
  grep -hE '^(baseline|gproj|base-|fwdfix)' "$@" |
    awk -v v="${AB_VARIANT:-gproj-fb}" '{k=$2" "$3" "$4" "$9" "$11" "$10}
      $1 == "baseline" {b[k] = $6} $1 == v {g[k] = $6}
      END {for (k in g) if (k in b) printf "%s %s %+.1f%%\n", v, k, 100 * (g[k] / b[k] - 1)}' |
    sort -k2,2n -k3,3n -k4,4 -k5,5 -k6,6 -k7,7V |
    awk '{k=$1" "$2" "$3" "$4" "$5" "$6; if (!(k in o)) n[++c] = k; o[k] = o[k]" "$7":"$8}
      END {for (i = 1; i <= c; ++i) print n[i], "bwd overhead" o[n[i]]}'
}

# candidate_tests_report DIR T0: scripts/device_candidate_tests.sh into DIR (logs, summary.txt), then the lines the
# run scripts print after it: its status and the seconds since T0 (a `date +%s`), the summary, the C++ suite's
# failures. Returns the tests' status. (Each run script of sessions 17-21 wrote these five lines out.)
candidate_tests_report() {
  bash scripts/device_candidate_tests.sh "$1" > "$1.log" 2>&1
  local rc=$?
  echo "candidate tests rc=$rc at $(( $(date +%s) - $2 )) s"
  cat "$1/summary.txt" 2>/dev/null
  grep -E "FAILED|Failure" "$1/cuda_tests.log" 2>/dev/null | head -20
  return $rc
}
