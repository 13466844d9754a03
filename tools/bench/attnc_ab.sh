#!/usr/bin/env bash
# Times the same specs with two attnc builds, alternating A, B, A, B in one process chain on one
# GPU (attnc bench: CUDA events, rotating inputs, median), and prints a table of the medians
# and B's ratio to A. For checking that a change leaves the kernels' speed alone.
#   tools/bench/attnc_ab.sh OLD_ATTNC NEW_ATTNC [SPEC_FILE]
# SPEC_FILE: one line per case, "LABEL|SPEC_A|SPEC_B|EXTRA ATTNC OPTIONS" (default: the bf16 d128
# B=1 H=16 S=8192 cases below). Each spec is benched twice per build. AB_SHAPE replaces the
# shape options (default "--batch 1 --heads 16 --seqlen-q 8192").
set -uo pipefail
old="$1"
new="$2"
cases="${3:-}"
common="${AB_SHAPE:---batch 1 --heads 16 --seqlen-q 8192} --warmup 5 --repeat 30 --json"
default_cases() {
  local d="dtype=bf16 head_dim=128"
  # The sm80 forward (its automatic shape before the registry) in both builds.
  echo "fwd none sm80|$d mask=none|$d mask=none tiles=128x48x4:q_shared|"
  echo "fwd causal sm80|$d mask=causal|$d mask=causal tiles=128x48x4:q_shared|"
  echo "fwd causal document sm80|$d mask=flashmask(causal=true,columns=1)|$d mask=flashmask(causal=true,columns=1) tiles=128x48x4:q_shared|--mask-data documents"
  echo "bwd none|$d mask=none direction=backward|$d mask=none direction=backward|"
  echo "bwd causal|$d mask=causal direction=backward|$d mask=causal direction=backward|"
  echo "bwd causal document|$d mask=flashmask(causal=true,columns=1) direction=backward|$d mask=flashmask(causal=true,columns=1) direction=backward|--mask-data documents"
  echo "bwd document deterministic|$d mask=flashmask(causal=false,columns=2) direction=backward deterministic=true|$d mask=flashmask(causal=false,columns=2) direction=backward deterministic=true|--mask-data documents"
}
median() {  # the median ("ms") of attnc bench --json
  python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["ms"])'
}
rows=()
while IFS='|' read -r label spec_a spec_b extra; do
  [[ -z "$label" ]] && continue
  a=(); b=()
  for round in 1 2; do
    # shellcheck disable=SC2086
    a+=("$($old bench --spec "$spec_a" $common $extra | median)")
    # shellcheck disable=SC2086
    b+=("$($new bench --spec "$spec_b" $common $extra | median)")
  done
  rows+=("$(python3 -c "
a=[float(x) for x in '${a[*]}'.split()]; b=[float(x) for x in '${b[*]}'.split()]
print(f'| $label | {a[0]:.3f} / {a[1]:.3f} | {b[0]:.3f} / {b[1]:.3f} | {min(b)/min(a):.3f} |')")")
done < <(if [[ -n "$cases" ]]; then cat "$cases"; else default_cases; fi)
echo "| case | A ms (two runs) | B ms (two runs) | B / A (best of each) |"
echo "|---|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
