#!/usr/bin/env bash
# Downloads the Debian packages the GPU machine lacks (GoogleTest, Google Benchmark, nlohmann-json, CLI11, fmt,
# OpenBLAS) into .deps/debs, for the device tool's `carry`; scripts/device_check.sh unpacks them there.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)  # the common one, also from a git worktree
mkdir -p "$(dirname "$exclude")"
grep -qx '/.deps/' "$exclude" 2>/dev/null || echo '/.deps/' >> "$exclude"
grep -qx '/.gproj_commit' "$exclude" 2>/dev/null || echo '/.gproj_commit' >> "$exclude"
mkdir -p .deps/debs
cd .deps/debs
apt-get download libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 \
  libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5 libbenchmark-dev libbenchmark1debian \
  libgomp1
cd ../..
git describe --always --dirty --abbrev=12 > .gproj_commit  # pass it as GPROJ_COMMIT too (see device_check.sh)
echo "device_deps: $(ls .deps/debs | wc -l) packages in .deps/debs ($(du -sh .deps | cut -f1)); commit $(cat .gproj_commit)"
