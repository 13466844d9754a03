#!/usr/bin/env bash
# The installed CMake package and pkg-config file, as a project outside the tree uses them:
# `cmake --install` of the build tree into a fresh prefix, then examples/consumer (which sets
# no C++ standard: attnjit::attnjit must ask for C++20) configured with find_package(attnjit)
# against that prefix, built and run, and examples/consumer/main.c built with nothing but
# `pkg-config --cflags --libs attnjit` and run without LD_LIBRARY_PATH. The programs compile
# kernels for sm_80 (no GPU needed); each must exit 0 and print the compile's report, the C++
# one also the mask it built with the installed mask language (attnjit/masks.hpp).
#   tools/package_test.sh <attnjit build tree>
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:?usage: tools/package_test.sh <attnjit build tree>}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
export ATTNJIT_CACHE_DIR="$work/cache"

cmake --install "$build" --prefix "$prefix" >/dev/null
for file in include/attnjit/jit.hpp include/attnjit/masks.hpp include/attnjit/attnjit.h \
            lib/libattnjit.so \
            lib/libattnjit_runtime.a lib/libattnjit_jit.a bin/attnc \
            lib/cmake/attnjit/attnjitConfig.cmake \
            lib/cmake/attnjit/attnjitConfigVersion.cmake lib/pkgconfig/attnjit.pc; do
  [[ -e "$prefix/$file" ]] || { echo "package_test: $file missing from the prefix" >&2; exit 1; }
done
"$prefix/bin/attnc" --help >/dev/null

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
# quiet COMMAND...: runs COMMAND, showing what it printed only when it fails.
quiet() {
  "$@" >"$work/log" 2>&1 || { cat "$work/log" >&2; echo "package_test: $* failed" >&2; exit 1; }
}
quiet cmake -S "$repo/examples/consumer" -B "$work/consumer" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix"
quiet cmake --build "$work/consumer" -j 2

version="$(sed -n 's/^project(attnjit VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")"
# expect PATTERN PROGRAM: PROGRAM, run without LD_LIBRARY_PATH, exits 0 and prints PATTERN.
expect() {
  local pattern="$1" output
  shift
  output="$(env -u LD_LIBRARY_PATH "$@")" || {
    echo "package_test: $* failed; it printed:" >&2
    echo "$output" >&2
    exit 1
  }
  if ! grep -Eq "$pattern" <<<"$output"; then
    echo "package_test: $* does not print /$pattern/; it printed:" >&2
    echo "$output" >&2
    exit 1
  fi
  printf '%s\n' "${output:0:300}"
}
expect "^  attnjit_[a-z0-9_]+ \\(forward\\): [0-9]+ registers, 0 spill bytes" \
  "$work/consumer/attnjit_consumer"
expect "^mask: predicate\\(_doc0\\[q\\]==_doc0\\[k\\]\\|\\|q>=k&&q-k<\\\$0\\), 1 tensor" \
  "$work/consumer/attnjit_consumer"
c_report="^attnjit $version: \\{.*\"kernels\":\\["
expect "$c_report" "$work/consumer/attnjit_c_consumer"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
if [[ "$(pkg-config --modversion attnjit)" != "$version" ]]; then
  echo "package_test: attnjit.pc says $(pkg-config --modversion attnjit), CMake $version" >&2
  exit 1
fi
# shellcheck disable=SC2046
cc -std=c99 -Wall -Werror "$repo/examples/consumer/main.c" -o "$work/c_consumer" \
  $(pkg-config --cflags --libs attnjit)
expect "$c_report" "$work/c_consumer"
echo "package_test: find_package(attnjit) and pkg-config attnjit $version work from $prefix"
