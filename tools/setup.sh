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
  exec ctest --test-dir build --output-on-failure -j 2
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
