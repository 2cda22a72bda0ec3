#!/usr/bin/env bash
# Packs the checked-out commit's GPU binaries for scripts/device_candidate_ab.sh (here, on the build machine):
# cuda_tests, gproj and cuda_attention_bench built in build/prebuilt (scripts/device_prebuild.sh configures it; an
# incremental build after a kernel change takes ~2.5 min on 2 cores), stripped, into DIR/pack.tar.xz (bin/...) beside
# DIR/COMMIT. DIR must start with ".pb_" (ignored by git: /.pb_*/ in .git/info/exclude). A tree with uncommitted
# changes is refused: the pack would be named after a commit it is not.
#   git checkout <candidate> && bash scripts/pack_candidate.sh .pb_name && git checkout main
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: $0 .pb_NAME" >&2; exit 2; }
dir=$1
[[ "$dir" =~ ^\.pb_[A-Za-z0-9_.-]+$ ]] || { echo "pack_candidate: DIR '$dir' must be .pb_NAME" >&2; exit 2; }
[ -f build/prebuilt/build.ninja ] ||
  { echo "pack_candidate: build/prebuilt is not configured (run scripts/device_prebuild.sh once)" >&2; exit 2; }
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "pack_candidate: the tree has uncommitted changes; commit the candidate first" >&2
  exit 2
fi
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.pb_\*/' "$exclude" 2>/dev/null || echo '/.pb_*/' >> "$exclude"
cmake --build build/prebuilt -j "$(nproc)" --target cuda_tests gproj cuda_attention_bench
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin"
cp build/prebuilt/tests/cuda_tests build/prebuilt/gproj build/prebuilt/bench/cuda_attention_bench "$stage/bin/"
strip "$stage/bin/"*
mkdir -p "$dir"
# xz -9: its 64 MB dictionary spans the three binaries, which share their CUDA code (8.9 MB at -6, 3.4 MB at -9).
XZ_OPT=-9 tar cJf "$dir/pack.tar.xz.tmp" -C "$stage" bin
mv "$dir/pack.tar.xz.tmp" "$dir/pack.tar.xz"
git rev-parse --short HEAD > "$dir/COMMIT.tmp" && mv "$dir/COMMIT.tmp" "$dir/COMMIT"
echo "pack_candidate: $dir for $(cat "$dir/COMMIT") ($(du -h "$dir/pack.tar.xz" | cut -f1))"
