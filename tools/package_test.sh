#!/usr/bin/env bash
# The installed CMake package and pkg-config file, as a project outside the tree uses them:
# `cmake --install` of the build tree into a fresh prefix, then examples/consumer configured
# with find_package(attnjit) against that prefix, built and run (it compiles kernels for
# sm_80: no GPU needed), and examples/consumer/main.c built with `pkg-config attnjit`.
#   tools/package_test.sh <attnjit build tree>
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:?usage: tools/package_test.sh <attnjit build tree>}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
export ATTNJIT_CACHE_DIR="$work/cache"

cmake --install "$build" --prefix "$prefix" >/dev/null
for file in include/attnjit/jit.hpp include/attnjit/attnjit.h lib/libattnjit.so \
            lib/libattnjit_runtime.a lib/libattnjit_jit.a bin/attnc \
            lib/cmake/attnjit/attnjitConfig.cmake \
            lib/cmake/attnjit/attnjitConfigVersion.cmake lib/pkgconfig/attnjit.pc; do
  [[ -e "$prefix/$file" ]] || { echo "package_test: $file missing from the prefix" >&2; exit 1; }
done
"$prefix/bin/attnc" --help >/dev/null

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
cmake -S "$repo/examples/consumer" -B "$work/consumer" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/consumer" -j 2 >/dev/null
"$work/consumer/attnjit_consumer"
"$work/consumer/attnjit_c_consumer" >/dev/null

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
version="$(sed -n 's/^project(attnjit VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")"
if [[ "$(pkg-config --modversion attnjit)" != "$version" ]]; then
  echo "package_test: attnjit.pc says $(pkg-config --modversion attnjit), CMake $version" >&2
  exit 1
fi
# shellcheck disable=SC2046
cc -std=c99 -Wall -Werror "$repo/examples/consumer/main.c" -o "$work/c_consumer" \
  $(pkg-config --cflags --libs attnjit) -Wl,-rpath,"$(pkg-config --variable=libdir attnjit)"
"$work/c_consumer" | head -c 200
echo
echo "package_test: find_package(attnjit) and pkg-config attnjit $(pkg-config --modversion attnjit) work from $prefix"
