#!/usr/bin/env bash
# Everything attnjit checks and measures on a GPU machine, from one command, for a build made
# elsewhere (build/ holds attnc, attnjit_gpu_tests and libattnjit.so):
#   1. the GPU tests (forward and backward); 2. the Python autograd tests; 3. `attnc run
#   --check` at 8K for each mask kind; 4. a tile sweep of the other head dims;
#   5. tools/bench/fwd_vs_sdpa.py and 6. tools/bench/bwd_vs_sdpa.py (attnjit vs SDPA flash /
#   cuDNN / dense mask and FlexAttention, each in one process); 7. `attnc bench` (C++ only) and
#   its GPU golden test when lit is installed; 8. tools/bench/compare.py --quick (the twelve
#   FlashMask families against every peer, checked against FlexAttention); its summary table
#   is printed last; 9. predicate masks: `attnc run --predicate --check` and
#   tools/bench/predicate_vs_peers.py; 10. tools/bench/random_check.py (30 forward problems
#   drawn at random for the device, checked; the seed is printed) and
#   tools/bench/random_grad_check.py (20 forward+backward problems through the Python binding).
# Usage: tools/bench/gpu_session.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${1:-${OUT:-/tmp/attnjit-session}}"
mkdir -p "$out"
export ATTNJIT_CACHE_DIR="${ATTNJIT_CACHE_DIR:-/tmp/attnjit-cache}"
attnc=build/tools/attnc
status=0

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"

echo "== GPU tests"
build/tests/attnjit_gpu_tests 2>&1 | tee "$out/gpu_tests.log" | tail -4
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

echo "== Python autograd tests (torch, GPU)"
PYTHONUNBUFFERED=1 python3 -m unittest discover -s tools/python/tests -p "test_autograd_gpu.py" \
  2>&1 | tail -3
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

echo "== Python mask builders with torch (GPU)"
PYTHONUNBUFFERED=1 python3 -m unittest discover -s tools/python/tests -p "test_builders.py" \
  2>&1 | tail -3
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

echo "== attnc run --check (bf16, d128, B=1, H=16, S=8192)"
for mask in none causal sliding_window "flashmask(causal=true,columns=1)" \
            "flashmask(causal=true,columns=2)" "flashmask(causal=false,columns=2)" \
            "flashmask(causal=false,columns=4)"; do
  extra=()
  [[ $mask == sliding_window ]] && extra=(--window-left 1024)
  $attnc run --spec "dtype=bf16 head_dim=128 mask=$mask" --batch 1 --heads 16 --seqlen-q 8192 \
    "${extra[@]}" --check --warmup 3 --repeat 20 >"$out/run.txt" 2>&1 || status=1
  echo "$mask: $(grep -E '^(time|check)' "$out/run.txt" | tr -s ' ' | tr '\n' ' ')"
done

echo "== attnc run --check with predicate masks (bf16, d128, B=1, H=16, S=8192)"
for predicate in "((q/128+k/128)%2==0)&&(q+k)%3!=0" "q>=k&&doc[q]==doc[k]" "k%7==0||q==k"; do
  tensors=()
  [[ $predicate == *doc* ]] && tensors=(--tensor doc=doc:1000,3000,2500,1692)
  $attnc run --spec "dtype=bf16 head_dim=128" --predicate "$predicate" "${tensors[@]}" \
    --batch 1 --heads 16 --seqlen-q 8192 --check --warmup 3 --repeat 20 >"$out/run.txt" 2>&1 \
    || status=1
  echo "$predicate: $(grep -E '^(time|check|attnc)' "$out/run.txt" | tr -s ' ' | tr '\n' ' ')"
done

echo "== random_check.py: forward problems drawn at random against the fp32 reference kernel"
python3 tools/bench/random_check.py --attnc "$attnc" --cases 30 --target none --out "$out/random_check.md" \
  >"$out/random_check.log" 2>&1 || status=1
grep -E "^(random_check|failed|\| all)" "$out/random_check.log"
echo "== random_grad_check.py: forward and backward of drawn problems through the Python binding"
PYTHONUNBUFFERED=1 python3 tools/bench/random_grad_check.py --cases 20 \
  --out "$out/random_grad_check.md" >"$out/random_grad_check.log" 2>&1 || status=1
grep -E "^(random_grad_check|failed|\| all)" "$out/random_grad_check.log"

echo "== tile sweep (bf16, B=1, H=16, S=8192; TFLOP/s none / causal)"
for dim_tiles in "64:auto,128x64x4:q_shared,128x128x4:q_shared" "96:auto,128x32x4:q_shared" \
                 "128:auto,128x32x4:q_shared,128x128x8:q_registers" \
                 "192:auto,128x32x8:q_shared" "256:auto,128x32x8:q_shared"; do
  dim=${dim_tiles%%:*}
  for tiles in $(echo "${dim_tiles#*:}" | tr ',' ' '); do
    line="d$dim $tiles:"
    for mask in none causal; do
      r=$($attnc run --spec "dtype=bf16 head_dim=$dim mask=$mask tiles=$tiles" --batch 1 \
          --heads 16 --seqlen-q 8192 --warmup 3 --repeat 20 --json 2>&1)
      line="$line $(python3 -c 'import json,sys; print(round(json.loads(sys.argv[1])["tflops"]))' "$r" 2>/dev/null || echo "error: $r")"
    done
    echo "$line"
  done
done

echo "== attnjit vs SDPA / FlexAttention (one process)"
PYTHONUNBUFFERED=1 python3 tools/bench/fwd_vs_sdpa.py --batch 1 --heads 16 --seqlen 8192 \
  --head-dim 128 --tiles 128x32x4:q_shared,128x128x8:q_registers,128x64x4:q_shared \
  --out "$out/fwd_vs_sdpa.md" || status=1

echo "== forward + backward vs SDPA / FlexAttention (one process)"
PYTHONUNBUFFERED=1 python3 tools/bench/bwd_vs_sdpa.py --out "$out/bwd_vs_sdpa.md" || status=1
echo "== predicate mask vs SDPA dense mask / FlexAttention (one process)"
PYTHONUNBUFFERED=1 python3 tools/bench/predicate_vs_peers.py --out "$out/predicate_vs_peers.md" \
  || status=1

echo "== attnc bench (bf16, d128, B=16, H=32, S=8192, causal document; TFLOP/s fwd / bwd)"
for direction in forward backward; do
  $attnc bench --spec "dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=1) direction=$direction" \
    --batch 16 --heads 32 --seqlen-q 8192 --warmup 3 --repeat 10 >"$out/bench.txt" 2>&1 || status=1
  echo "$direction: $(grep -E '^(problem|time|rate)' "$out/bench.txt" | tr -s ' ' | tr '\n' ' ')"
done
lit=/usr/lib/llvm-14/build/utils/lit/lit.py
if [[ -f $lit ]]; then
  python3 "$lit" -sv tests/golden --param attnc=$attnc --filter bench_gpu 2>&1 | tail -3
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
else
  echo "golden bench_gpu.test: skipped (no $lit)"
fi

echo "== compare.py --quick: twelve FlashMask families vs SDPA / FlexAttention (one process)"
PYTHONUNBUFFERED=1 python3 tools/bench/compare.py --quick --out "$out/compare_quick.md" || status=1
exit $status
