#!/usr/bin/env bash
# Installs the attnjit package with pip (no network, no build isolation) into a fresh virtual
# environment and runs the CPU Python tests against the installed copy, from outside the source
# tree and without ATTNJIT_LIBRARY: what `pip install .` gives a user.
#   tools/python/install_test.sh [CMake build tree to reuse, e.g. build]
# Without an argument pip configures and builds the library in build/python/cmake.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-}"

python=""
for candidate in /usr/bin/python3 python3; do
  if command -v "$candidate" >/dev/null 2>&1 &&
     "$candidate" -c "import setuptools, wheel, venv, ensurepip" >/dev/null 2>&1; then
    python="$candidate"
    break
  fi
done
if [[ -z "$python" ]]; then
  echo "install_test: no python3 with setuptools, wheel and venv (Debian: python3-venv" \
       "python3-setuptools python3-wheel; tools/install-deps.sh installs them)" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" -m venv --system-site-packages "$work/venv"
unset ATTNJIT_LIBRARY
export ATTNJIT_CACHE_DIR="$work/cache"
ATTNJIT_CMAKE_BUILD_DIR="$build" "$work/venv/bin/python" -m pip install --quiet \
  --no-build-isolation --no-index --no-deps "$repo"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import pathlib
import attnjit
package = pathlib.Path(attnjit.__file__).resolve().parent
assert (package / "libattnjit.so").is_file(), f"no libattnjit.so in {package}"
print(f"install_test: attnjit {attnjit.version()} imported from {package}")
PY
exec "$work/venv/bin/python" "$repo/tools/python/tests/run_tests.py" --cpu --installed
