#!/usr/bin/env bash
# Runs the CPU benchmark (emulator beside OpenBLAS sgemm, same run) and saves JSON with its environment
# under bench/results/. Usage: bench/run_cpu_bench.sh [extra Google Benchmark flags]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/build/release/bench/cpu_attention_bench"
[ -x "$bin" ] || { echo "build first: cmake --preset release && cmake --build --preset release" >&2; exit 2; }
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out="$root/bench/results/cpu_${stamp}.json"
tmp="$out.tmp.$$"
"$bin" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_out="$tmp" --benchmark_out_format=json \
  --benchmark_context=gproj_commit="$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" \
  --benchmark_context=cpu_model="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
  --benchmark_context=command="bench/run_cpu_bench.sh $*" \
  --benchmark_context=openblas="$(dpkg-query -W -f='${Version}' libopenblas0-pthread 2>/dev/null || echo unknown)" \
  --benchmark_context=compiler="$(c++ --version | head -1)" "$@"
mv "$tmp" "$out"
echo "saved $out" >&2
