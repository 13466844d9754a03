#!/usr/bin/env bash
# One command from a fresh Debian machine:
#   tools/setup.sh demo   install, build, then compile a FlashMask kernel and run it on the
#                         GPU (checked against the reference); without a GPU, print its IR
#                         and a summary of each kernel, and write its PTX to a file
#   tools/setup.sh test   install, build, run every test (GPU tests skip without a GPU)
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-}"
if [[ "$mode" != "demo" && "$mode" != "test" ]]; then
  echo "usage: tools/setup.sh demo|test" >&2
  exit 2
fi

tools/install-deps.sh
cuda_home="${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}"
# The mask-language fuzzer (a ctest entry) needs clang with libFuzzer: install-deps adds it.
fuzzers=OFF
if command -v clang++-14 >/dev/null 2>&1; then fuzzers=ON; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="$cuda_home" \
  -DATTNJIT_BUILD_FUZZERS="$fuzzers"
# The demo runs attnc alone: build it and what it links, not the tests and fuzzers.
targets=()
if [[ "$mode" == "demo" ]]; then targets=(--target attnc); fi
cmake --build build -j "$(nproc)" "${targets[@]}"

if [[ "$mode" == "test" ]]; then
  # Every core busy (the long entries start first: tests/CMakeLists.txt gives them a COST);
  # then the ten slowest entries, from the run's JUnit report (a summary: ctest's status is
  # the script's).
  status=0
  ctest --test-dir build --output-on-failure -j "$(nproc)" --output-junit ctest-junit.xml ||
    status=$?
  python3 - build/ctest-junit.xml <<'PY' || true
import sys
import xml.etree.ElementTree as ElementTree

cases = ElementTree.parse(sys.argv[1]).getroot().iter("testcase")
times = sorted(((float(c.get("time", 0)), c.get("name")) for c in cases), reverse=True)
print("Slowest tests:")
for seconds, name in times[:10]:
    print(f"  {seconds:8.1f} s  {name}")
PY
  exit $status
fi

spec="dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=1)"
errors="$(mktemp)"
trap 'rm -f "$errors"' EXIT
status=0
build/tools/attnc run --spec "$spec" --batch 2 --heads 16 --seqlen-q 4096 --check \
  --warmup 3 --repeat 20 2>"$errors" || status=$?
if [[ $status -eq 1 ]] && grep -q "no CUDA" "$errors"; then
  # Without a GPU: the IR, then per kernel what ptxas reported and what its PTX is made of;
  # the PTX itself (thousands of lines) goes to a file.
  arch=sm_90a
  ptx="$PWD/build/demo-$arch.ptx"
  echo "No GPU here ($(head -1 "$errors")); compiling for $arch instead: $spec"
  echo
  build/tools/attnc emit --spec "$spec" --stage ir --arch "$arch"
  echo
  build/tools/attnc compile --spec "$spec" --arch "$arch" --ptx-out "$ptx"
  exit 0
fi
cat "$errors" >&2
exit $status
