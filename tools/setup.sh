#!/usr/bin/env bash
# One command from a fresh Debian machine:
#   tools/setup.sh demo   install, build, then compile a FlashMask kernel and run it on the
#                         GPU (checked against the reference), or print its IR and PTX when
#                         there is no GPU
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
cmake --build build -j "$(nproc)"

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
  echo "No GPU here ($(head -1 "$errors")); the IR and PTX of: $spec"
  build/tools/attnc emit --spec "$spec" --stage ir --arch sm_90
  build/tools/attnc emit --spec "$spec" --stage ptx --arch sm_90
  exit 0
fi
cat "$errors" >&2
exit $status
