#!/usr/bin/env python3
"""attnjit with a predicate mask against SDPA with the dense mask and FlexAttention.

bf16 q, k, v [B, S, H, D] (defaults B=1, H=16, S=8192, D=128) under the checkerboard of
128-blocks with a per-element condition, `((q / 128 + k / 128) % 2 == 0) && (q + k) % 3 != 0`
(a mask FlashMask intervals cannot express): attnjit.attention(mask=attnjit.predicate(...)),
SDPA with the equivalent dense boolean mask (the backend SDPA picks for it) and compiled
FlexAttention with the same rule as a mask_mod and its BlockMask.

Each implementation is first checked against SDPA with the dense mask on the same inputs:
relative errors of o, dq, dk, dv must be <= 2e-2, else the row is marked WRONG and the script
exits 1 after the report. Then it times forward alone and forward+backward (o.backward(dO)
with one fixed random dO) with CUDA events: warm-up, median of --runs, rotating among 3 input
sets. FLOPs count visible (query, key) pairs: forward 4·B·H·D·pairs, backward 2.5x forward.

    python3 tools/bench/predicate_vs_peers.py --batch 1 --heads 16 --seqlen 8192 \\
        --head-dim 128 --out predicate_results.md
"""

import datetime
import shlex
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import attnjit  # noqa: E402
from bwd_vs_sdpa import (BACKWARD_FLOPS_FACTOR, INPUT_SETS, MAX_RELATIVE_ERROR,  # noqa: E402
                          check_and_time, failed_check, in_bhsd, outputs_and_grads, timed,
                          training_inputs)
from timing import problem_parser, publish  # noqa: E402

EXPRESSION = "((q / 128 + k / 128) % 2 == 0) && (q + k) % 3 != 0"
compiled_flex = torch.compile(flex_attention)


def parse_args():
    parser = problem_parser(__doc__.split("\n\n")[0], warmup=5)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def mask_mod(b, h, q_idx, kv_idx):
    """EXPRESSION as FlexAttention's mask_mod (indices are >= 0, so // and % agree with the
    predicate's truncating division)."""
    return ((q_idx // 128 + kv_idx // 128) % 2 == 0) & ((q_idx + kv_idx) % 3 != 0)


def dense_visible(seqlen, device):
    """The bool mask [S, S] of EXPRESSION (True = takes part in attention)."""
    rows = torch.arange(seqlen, device=device)[:, None]
    cols = torch.arange(seqlen, device=device)[None, :]
    return mask_mod(None, None, rows, cols)


def implementations(args, visible):
    predicate = attnjit.predicate(EXPRESSION)
    block_mask = create_block_mask(mask_mod, None, None, args.seqlen, args.seqlen, device="cuda")
    return [
        ("SDPA dense mask", in_bhsd(
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=visible))),
        ("attnjit", lambda q, k, v: attnjit.attention(q, k, v, mask=predicate)),
        ("attnjit deterministic",
         lambda q, k, v: attnjit.attention(q, k, v, mask=predicate, deterministic=True)),
        ("FlexAttention", in_bhsd(lambda q, k, v: compiled_flex(q, k, v, block_mask=block_mask))),
    ]


def main():
    started = time.perf_counter()
    args = parse_args()
    torch.manual_seed(args.seed)
    b, s, h, d = args.batch, args.seqlen, args.heads, args.head_dim
    shape = (b, s, h, d)
    inputs, d_o = training_inputs(shape)
    visible = dense_visible(s, "cuda")
    pairs = b * int(visible.sum().item())
    forward_flops = 4 * h * d * pairs
    impls = implementations(args, visible)
    reference = outputs_and_grads(impls[0][1], *inputs[0], d_o)

    rows, failures = [], []
    for name, attention in impls:
        print(f"  {name}", file=sys.stderr, flush=True)
        try:
            errors, forward_ms, total_ms = check_and_time(attention, inputs, d_o, reference, args)
        except Exception as error:  # one implementation failing must not hide the others
            check = failed_check(error)
            if name.startswith("attnjit"):
                failures.append(f"{name}: {check}")
            rows.append(dict(name=name, check=check))
            continue
        check = "reference" if name == impls[0][0] else \
            "rel " + " / ".join(f"{e:.1e}" for e in errors)
        if not all(e <= MAX_RELATIVE_ERROR for e in errors):
            failures.append(f"{name}: relative errors o/dq/dk/dv {errors} (limit "
                            f"{MAX_RELATIVE_ERROR})")
            check = f"WRONG: {check}"
        rows.append(dict(name=name, check=check, **timed(forward_ms, total_ms, forward_flops)))

    command = "python3 " + " ".join(shlex.quote(arg) for arg in sys.argv)
    ours = next((row for row in rows if row["name"] == "attnjit" and "total_ms" in row), None)
    lines = [
        f"## attnjit predicate mask vs SDPA dense mask / FlexAttention: "
        f"{torch.cuda.get_device_name()}",
        "",
        f"torch {torch.__version__}, attnjit {attnjit.version()}, "
        f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; `{command}` "
        f"({time.perf_counter() - started:.0f} s, compiles included)",
        "",
        f"bf16, B={b} H={h} S={s} D={d}, mask `{EXPRESSION}` ({pairs / (b * s * s):.1%} of "
        f"pairs visible); median of {args.runs} runs over {INPUT_SETS} rotating input sets; "
        f"FLOPs count visible pairs (backward {BACKWARD_FLOPS_FACTOR}x forward); speedup = the "
        "row's time / attnjit's",
        "",
        "| implementation | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | "
        "attnjit fwd / fwd+bwd speedup | check |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        if "total_ms" not in row:
            lines.append(f"| {row['name']} | - | - | - | - | - | {row['check']} |")
            continue
        speedup = "-" if ours is None else \
            f"{row['forward_ms'] / ours['forward_ms']:.2f}x / {row['total_ms'] / ours['total_ms']:.2f}x"
        lines.append(f"| {row['name']} | {row['forward_ms']:.2f} | {row['forward_tflops']:.0f} | "
                     f"{row['total_ms']:.2f} | {row['total_tflops']:.0f} | {speedup} | "
                     f"{row['check']} |")
    if failures:
        lines += ["", "**FAILED correctness checks:**"] + [f"- {failure}" for failure in failures]
    text = "\n".join(lines) + "\n"
    publish(text, args.out, failures)


if __name__ == "__main__":
    main()
