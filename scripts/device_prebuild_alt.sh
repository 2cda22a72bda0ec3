#!/usr/bin/env bash
# Packs the GPU test binary (cuda_tests) of an earlier commit into .prebuilt_alt/ (pack.tar.xz, COMMIT), built here
# in a git worktree with nvcc, for scripts/device_kernel_check.sh's ALT_PREBUILT: when a GPU test fails at the new
# commit, the same filter at the earlier one says whether the failure came with the commits in between. Runtime
# libraries come from .prebuilt/debs (scripts/device_prebuild.sh). Usage: bash scripts/device_prebuild_alt.sh COMMIT
# [DIR] (DIR defaults to .prebuilt_alt; it must start with .prebuilt_alt, which .git/info/exclude ignores).
# Device tool: carry [".gproj_commit", ".prebuilt", ".prebuilt_alt", ...], ALT_PREBUILT=".prebuilt_alt ...".
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 COMMIT [DIR]" >&2; exit 2; }
commit=$(git rev-parse --short=12 "$1^{commit}") || { echo "device_prebuild_alt: no commit $1" >&2; exit 2; }
dir=${2:-.prebuilt_alt}
case "$dir" in .prebuilt_alt*) ;; *) echo "device_prebuild_alt: DIR must start with .prebuilt_alt" >&2; exit 2 ;; esac
exclude=$(git rev-parse --git-path info/exclude)  # the common one, also from a git worktree
mkdir -p "$(dirname "$exclude")"
grep -qx '/.prebuilt_alt\*/' "$exclude" 2>/dev/null || echo '/.prebuilt_alt*/' >> "$exclude"
tree=build/alt-worktree
t0=$SECONDS
git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
git worktree prune
git worktree add --detach "$tree" "$commit" >/dev/null
trap 'git worktree remove --force "$tree" 2>/dev/null || true' EXIT
cmake -S "$tree" -B build/alt -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPROJ_NATIVE=OFF -DGPROJ_BUILD_BENCH=OFF \
  -DGPROJ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a >build/alt.configure.log 2>&1 || { tail -20 build/alt.configure.log; exit 1; }
cmake --build build/alt -j "$(nproc)" --target cuda_tests >build/alt.build.log 2>&1 || { tail -30 build/alt.build.log; exit 1; }
stage=build/alt.stage
rm -rf "$stage" "$dir" && mkdir -p "$stage/bin" "$dir"
cp build/alt/tests/cuda_tests "$stage/bin/"
strip "$stage/bin/cuda_tests"
tar cJf "$dir/pack.tar.xz" -C "$stage" bin
echo "$commit" > "$dir/COMMIT"
echo "device_prebuild_alt: $(du -sh "$dir" | cut -f1) in $dir for $commit in $((SECONDS - t0)) s"
