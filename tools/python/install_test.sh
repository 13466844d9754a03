#!/usr/bin/env bash
# The README's `python3 -m pip install .` from a clean state: a fresh virtual environment of the
# machine's default python3 (no system site packages: no wheel package, nothing but what venv
# puts there), the README's command with no package index at all (PIP_NO_INDEX), then, from
# another directory and without ATTNJIT_LIBRARY, `import attnjit` with __version__ checked
# against CMake's project version, and the CPU Python tests against the installed copy. The
# same install with --no-build-isolation, and with Debian's /usr/bin/python3 where it is
# another interpreter, must work too.
#   tools/python/install_test.sh [CMake build tree to reuse, e.g. build]
# The source tree's build/ is what pip reuses by default (and the test checks that it did);
# another tree is named to pip by ATTNJIT_CMAKE_BUILD_DIR. Without an argument pip builds where
# a user's would: build/ when it is configured, else build/python/cmake.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:+$(cd "$1" && pwd)}"
version="$(sed -n 's/^project(attnjit VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
unset ATTNJIT_LIBRARY ATTNJIT_CMAKE_BUILD_DIR
export ATTNJIT_CACHE_DIR="$work/cache"
# Nothing may come from an index; no configuration of this machine's pip takes part.
for variable in $(compgen -e); do
  if [[ "$variable" == PIP_* ]]; then unset "$variable"; fi
done
export PIP_NO_INDEX=1 PIP_CONFIG_FILE=/dev/null PIP_NO_CACHE_DIR=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [[ -n "$build" && "$build" != "$repo/build" ]]; then
  export ATTNJIT_CMAKE_BUILD_DIR="$build"
fi
private_tree_before="$(test -e "$repo/build/python/cmake/CMakeCache.txt" && echo yes || echo no)"

# fresh_install NAME PYTHON: a fresh venv $work/NAME of PYTHON, then the README's command in it.
fresh_install() {
  "$2" -m venv "$work/$1"
  (cd "$repo" && "$work/$1/bin/python" -m pip install .)
}

# check NAME: import the installed package from outside the tree; its version is CMake's.
check() {
  (cd "$work" &&
   "$work/$1/bin/python" - "$version" "$work/$1" "${build:+$build/libattnjit.so}") <<'PY'
import filecmp
import pathlib
import sys

import attnjit

version, venv, built = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
package = pathlib.Path(attnjit.__file__).resolve().parent
assert venv.resolve() in package.parents, f"attnjit imported from {package}, not from {venv}"
library = package / "libattnjit.so"
assert library.is_file(), f"no libattnjit.so in {package}"
if built:
    assert filecmp.cmp(library, built, shallow=False), f"{library} is not {built}"
assert attnjit.__version__ == version, f"__version__ {attnjit.__version__!r}, CMake {version!r}"
assert attnjit.version() == version, f"version() {attnjit.version()!r}, CMake {version!r}"
print(f"install_test: attnjit {attnjit.__version__} (Python {sys.version.split()[0]}) "
      f"imported from {package}")
PY
}

default_python="$(command -v python3)"
fresh_install default "$default_python"
check default
if [[ -n "$build" && -z "${ATTNJIT_CMAKE_BUILD_DIR:-}" && "$private_tree_before" == no &&
      -e "$repo/build/python/cmake/CMakeCache.txt" ]]; then
  echo "install_test: pip configured build/python/cmake instead of reusing build/" >&2
  exit 1
fi

"$work/default/bin/python" -m pip uninstall --quiet --yes attnjit
(cd "$repo" && "$work/default/bin/python" -m pip install --quiet --no-build-isolation .)
check default

identity='import sys; print(sys.base_prefix, sys.version)'
if [[ -x /usr/bin/python3 &&
      "$(/usr/bin/python3 -c "$identity")" != "$("$default_python" -c "$identity")" ]]; then
  fresh_install debian /usr/bin/python3
  check debian
fi

cd "$work"
exec "$work/default/bin/python" "$repo/tools/python/tests/run_tests.py" --cpu --installed
