#!/usr/bin/env bash
# Builds here (nvcc, no GPU needed) what scripts/device_check.sh otherwise builds on the GPU machine, so a device
# command spends its minutes on tests and benchmarks: the CUDA C++ targets (cuda_tests, gproj,
# cuda_attention_bench; sm_90, portable CPU flags) and the PyTorch extension with the CUDA kernels for the GPU
# machine's Python 3.12 and torch 2.11.0+cu130 (a venv in build/venv312 with the same torch from PyPI). Both are
# stripped and packed into .prebuilt/pack.tar.xz (40 MB of binaries travel as ~3.5 MB at xz -9; the device tool
# carries at most 64 MiB with the working tree), beside the commit in .prebuilt/COMMIT and the four Debian runtime
# packages the binaries load (OpenBLAS, gfortran, gomp, fmt) in .prebuilt/debs. The device tool's carry is then
# [".gproj_commit", ".prebuilt"]; scripts/device_env.sh unpacks it when COMMIT equals GPROJ_COMMIT (.deps, the
# build dependencies, is needed only for a build on the machine).
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)  # the common one, also from a git worktree
mkdir -p "$(dirname "$exclude")"
grep -qx '/.prebuilt/' "$exclude" 2>/dev/null || echo '/.prebuilt/' >> "$exclude"
commit=$(git describe --always --dirty --abbrev=12)
export GPROJ_COMMIT=$commit
t0=$SECONDS
mkdir -p build  # (a fresh clone or worktree has none: the logs below go there)

cmake -S . -B build/prebuilt -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPROJ_NATIVE=OFF -DGPROJ_BUILD_BENCH=ON \
  -DGPROJ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a >build/prebuilt.configure.log 2>&1 ||
  { tail -20 build/prebuilt.configure.log; exit 1; }
# An object whose header dependencies ninja did not record ("#deps 0": its depfile was lost, e.g. by two builds at
# once in this directory) is never rebuilt when only a header changes. The kernels are all in headers that
# launch.cu includes, so such an object packs old kernels under the new commit (session 15: two A/B runs compared a
# build with itself). Remove it so that it is compiled again.
if [ -f build/prebuilt/.ninja_deps ]; then
  (cd build/prebuilt && ninja -t deps | sed -n 's/^\([^ ].*\.o\): #deps 0,.*/\1/p') | while read -r o; do
    echo "device_prebuild: no header dependencies recorded for $o; rebuilding it"
    rm -f "build/prebuilt/$o"
  done
fi
cmake --build build/prebuilt -j "$(nproc)" --target cuda_tests gproj cuda_attention_bench wgmma_probe >build/prebuilt.build.log 2>&1 ||
  { tail -30 build/prebuilt.build.log; exit 1; }

py=build/venv312/bin/python
if ! "$py" -c 'import torch, sys; assert torch.__version__.startswith("2.11.0") and sys.version_info[:2] == (3, 12)' 2>/dev/null; then
  py312=python3.12
  # A pyenv shim answers `command -v` but fails when 3.12 is installed and not selected: ask pyenv for it then.
  if ! "$py312" -c '' 2>/dev/null && command -v pyenv >/dev/null; then
    v=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.12(\.|$)' | tail -1)
    [ -z "$v" ] || py312="$(pyenv root)/versions/$v/bin/python3.12"
  fi
  "$py312" -c '' 2>/dev/null || { echo "device_prebuild: python3.12 is needed for the GPU machine's extension" >&2; exit 1; }
  "$py312" -m venv build/venv312
  "$py" -m pip install -q --disable-pip-version-check torch==2.11.0 numpy setuptools
fi
# In place: the 3.12 module (_C.cpython-312-...so) and its build/temp.*-cpython-312 objects sit beside the CI
# venv's 3.11 ones without touching them.
GPROJ_CUDA=1 MAX_JOBS="$(nproc)" "$py" setup.py build_ext --inplace >build/prebuilt.python.log 2>&1 ||
  { tail -30 build/prebuilt.python.log; exit 1; }

stage=build/prebuilt.stage
rm -rf "$stage" .prebuilt && mkdir -p "$stage/bin" .prebuilt/debs
cp build/prebuilt/tests/cuda_tests build/prebuilt/gproj build/prebuilt/bench/cuda_attention_bench \
  build/prebuilt/bench/wgmma_probe "$stage/bin/"
cp python/gproj/_C.cpython-312-x86_64-linux-gnu.so "$stage/"
strip "$stage"/bin/* "$stage/_C.cpython-312-x86_64-linux-gnu.so"
# xz -9: its 64 MB dictionary spans the binaries, which share their CUDA code (-6: 9.8 MB, -9: 3.5 MB in session 40).
XZ_OPT=-9 tar cJf .prebuilt/pack.tar.xz -C "$stage" bin _C.cpython-312-x86_64-linux-gnu.so
[ -d .deps/debs ] || bash scripts/device_deps.sh
for p in libopenblas0-pthread libgfortran5 libgomp1 libfmt9; do
  cp .deps/debs/${p}_*.deb .prebuilt/debs/ || { echo "device_prebuild: no $p package in .deps/debs" >&2; exit 1; }
done
echo "$commit" > .prebuilt/COMMIT
echo "device_prebuild: $(du -sh .prebuilt | cut -f1) in .prebuilt for $commit in $((SECONDS - t0)) s"
# The backward's and the forward's kernels: no atomic whose result is unused may stay a returning ATOMG (one in
# the forward-statistics form's loop cost 261 µs until v3.49; scripts/sass_atomics.py, which fetches cuobjdump from
# PyPI into build/tools when the toolkit lacks it). A finding is reported, not fatal (a speed hazard, not a wrong
# result), and so is a check that could not run.
python3 scripts/sass_atomics.py build/prebuilt/bench/cuda_attention_bench --fetch \
  --kernels 'flash_(bwd|fwd)|thresh_dq' >build/prebuilt.sass_atomics.txt 2>&1
case $? in
  0) echo "device_prebuild: $(tail -1 build/prebuilt.sass_atomics.txt)" ;;
  1) echo "device_prebuild: WARNING: $(tail -1 build/prebuilt.sass_atomics.txt); see build/prebuilt.sass_atomics.txt" ;;
  *) echo "device_prebuild: the SASS atomics check did not run: $(tail -1 build/prebuilt.sass_atomics.txt)" ;;
esac
