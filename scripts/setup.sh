#!/usr/bin/env bash
# Installs everything gproj needs to build and test on Debian 12 (idempotent; run as root); extra Debian package
# names given as arguments are installed too. Exercised by scripts/build.sh, fuzz.sh, python_test.sh (.ci/run).
set -euo pipefail

packages=(
  build-essential cmake ninja-build git python3 python3-pip
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libopenblas-dev libomp-dev
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all Debian packages present" >&2
fi
