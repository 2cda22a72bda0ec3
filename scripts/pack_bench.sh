#!/usr/bin/env bash
# Packs the cuda_attention_bench of other commits for scripts/device_bench_ab.sh (here, on the build machine): for
# each REV (a branch, tag or commit) a worktree under build/pack_bench/, a bench-only CUDA build there (~90 s on 2
# cores), and .ab_NAME/bench.tar.xz with .ab_NAME/COMMIT, NAME being REV with '/' turned into '_'.
#   bash scripts/pack_bench.sh candidate/s9-block-suffix main
# then on the device: BENCHES=".ab_main .ab_candidate_s9-block-suffix" bash scripts/device_bench_ab.sh, with the
# .ab_* folders carried (they are ignored by git: /.ab_*/ in .git/info/exclude).
# ABLATE=N (1-255) builds with -DGPROJ_ABLATE=N (parts of gproj's main kernel, bits 1-8; of the forward's statistics,
# 16 and 32; of thresh_dq's listed entries, 64 and 128: removed for timing only; src/cuda/flash_bwd_wg.cuh,
# flash_fwd_wg.cuh, projection_tc.cuh): NAME and the commit recorded get the suffix _ablateN / +ablateN.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 REV [REV...]" >&2; exit 2; }
ablate=${ABLATE:-0}
[[ "$ablate" =~ ^([0-9]|[1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-5])$ ]] || { echo "pack_bench: ABLATE must be 0-255, got '$ablate'" >&2; exit 2; }
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "pack_bench: nvcc is needed" >&2; exit 2; }
exclude=$(git rev-parse --git-path info/exclude)  # the common one, also from a git worktree
mkdir -p "$(dirname "$exclude")"
grep -qx '/.ab_\*/' "$exclude" 2>/dev/null || echo '/.ab_*/' >> "$exclude"
for rev in "$@"; do
  commit=$(git rev-parse --verify --quiet "$rev^{commit}") || { echo "pack_bench: no commit $rev" >&2; exit 2; }
  name=${rev//\//_} short=$(git rev-parse --short=12 "$commit")
  if [ "$ablate" != 0 ]; then name+="_ablate$ablate" short+="+ablate$ablate"; fi
  wt="build/pack_bench/$name" t0=$SECONDS
  git worktree remove --force "$wt" 2>/dev/null || rm -rf "$wt"
  git worktree add --detach -f "$wt" "$commit" >/dev/null
  if ! (cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPROJ_NATIVE=OFF -DGPROJ_BUILD_BENCH=ON \
          -DGPROJ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGPROJ_ABLATE="$ablate" >"$wt.configure.log" 2>&1 &&
        cmake --build "$wt/build" -j "$(nproc)" --target cuda_attention_bench >"$wt.build.log" 2>&1); then
    tail -20 "$wt.configure.log" "$wt.build.log" >&2 2>/dev/null || true
    git worktree remove --force "$wt" || true
    echo "pack_bench: the build of $rev failed (logs: $wt.configure.log, $wt.build.log)" >&2
    exit 1
  fi
  stage=$(mktemp -d)
  cp "$wt/build/bench/cuda_attention_bench" "$stage/" && strip "$stage/cuda_attention_bench"
  mkdir -p ".ab_$name"
  tar cJf ".ab_$name/bench.tar.xz.tmp" -C "$stage" cuda_attention_bench
  mv -f ".ab_$name/bench.tar.xz.tmp" ".ab_$name/bench.tar.xz"
  echo "$short" > ".ab_$name/COMMIT.tmp" && mv -f ".ab_$name/COMMIT.tmp" ".ab_$name/COMMIT"
  rm -rf "$stage"
  git worktree remove --force "$wt"
  echo "pack_bench: .ab_$name ($short, $(du -sh ".ab_$name" | cut -f1)) in $((SECONDS - t0)) s"
done
