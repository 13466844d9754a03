#!/usr/bin/env bash
# Installs what attnjit needs on a Debian machine (only the packages that are missing).
# The CUDA toolkit (NVRTC and headers) is expected in $CUDA_HOME or /usr/local/cuda.
set -euo pipefail

# python3-venv/-pip: `pip install .` of the Python package (and its CI
# test); pkgconf: the installed attnjit.pc is checked with pkg-config.
packages=(cmake ninja-build g++ python3 python3-venv
          python3-pip pkgconf libfmt-dev catch2 libcli11-dev nlohmann-json3-dev libxxhash-dev
          llvm-14-tools clang-14 libclang-rt-14-dev)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cuda_home="${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}"
if ! ls "$cuda_home"/lib*/libnvrtc.so* >/dev/null 2>&1 || [[ ! -f "$cuda_home/include/cuda.h" ]]; then
  echo "install-deps: no CUDA toolkit (NVRTC and cuda.h) under $cuda_home;" \
       "install CUDA 12 or 13 there or set CUDA_HOME" >&2
  exit 1
fi
