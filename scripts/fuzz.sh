#!/usr/bin/env bash
# Builds fuzz/state_reader_fuzz with clang (libFuzzer + ASan + UBSan) in build/fuzz and runs it for N seconds.
# Exercised by CI through scripts/test.sh (30 s, after scripts/build.sh) and by long runs by hand (docs/fuzzing.md).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/fuzz.sh [--seconds N]   (default 30)"; }

seconds=30
while (($#)); do
  case "$1" in
    --seconds) seconds="${2:-}"; shift $(($# >= 2 ? 2 : 1)) ;;
    --seconds=*) seconds="${1#*=}"; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz: --seconds needs a positive integer, got '$seconds'" >&2
  exit 2
fi

# The top-level configure needs the project's dependencies (scripts/setup.sh, idempotent); clang's
# -fsanitize=fuzzer,address,undefined runtimes are in libclang-rt-14-dev, which clang-14 only recommends.
bash scripts/setup.sh clang-14 libclang-rt-14-dev

build=build/fuzz
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGPROJ_BUILD_FUZZ=ON -DGPROJ_BUILD_TESTS=OFF -DGPROJ_BUILD_BENCH=OFF -DGPROJ_CUDA=OFF >/dev/null
cmake --build "$build" --target state_reader_fuzz -j "$(nproc)"

# The corpus grows in a temporary copy; only findings are kept, in build/fuzz/artifacts (cleared per run).
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r fuzz/corpus "$work/corpus"
artifacts="$build/artifacts"
log="$build/fuzz.log"
rm -rf "$artifacts"
mkdir -p "$artifacts"

echo "fuzz: running state_reader_fuzz for ${seconds} s (log: $log)" >&2
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
start=$SECONDS
rc=0
"$build/fuzz/state_reader_fuzz" "$work/corpus" -dict=fuzz/safetensors.dict -max_len=65536 -timeout=10 \
  -rss_limit_mb=2048 -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$artifacts/" \
  >"$log" 2>&1 || rc=$?
elapsed=$((SECONDS - start))

executions="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
corpus="$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -n 1 | cut -d' ' -f2)"
reproducer="$(sed -n "s/.*Test unit written to //p" "$log" | tail -n 1)"

if ((rc == 0)); then
  result="no findings"
else
  tail -n 60 "$log" >&2
  result="FINDING (exit status $rc)"
  if [[ -n "$reproducer" ]]; then
    result+=", reproducer: $reproducer"
  fi
fi
echo "fuzz: state_reader_fuzz: ${executions:-?} executions in ${elapsed} s, corpus ${corpus:-?} (entries/size), $result"
exit "$rc"
