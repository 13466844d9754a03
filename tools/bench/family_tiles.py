#!/usr/bin/env python3
"""attnjit's forward alone on the FlashMask families, with forced tile shapes side by side.

For tuning the registry's automatic shapes: each family of docs/masks.md (compare.py's masks:
same parameters and seed, S x batch with 4096 / D heads, bf16, no LSE) is timed with the
automatic choice and with each shape of --tiles forced through the spec's `tiles=` key, in one
process on one GPU (CUDA events, warm-up, median of --runs, rotating among 3 input sets).
`causal_as_flashmask` adds a control: causal attention written as a FlashMask (causal=true and
one LTS column of value S: nothing hidden beyond the diagonal), which visits the same key
blocks as mask=causal, so the two times differ by what the FlashMask path costs.
`--mode fwd+bwd` times a training step's forward and backward instead (attnjit.attention and
o.backward(dO), inputs that require grad, FLOPs 3.5x the forward's; the automatic tiles only:
`tiles=` forces the forward alone), for comparing builds on the backward.
Prints the markdown report, the table last; --out writes it.

    python3 tools/bench/family_tiles.py --head-dim 64 \
        --tiles 128x128x12:warpgroups,64x128x8:warpgroups
    python3 tools/bench/family_tiles.py --head-dim 128 --mode fwd+bwd --families document
"""

import argparse
import datetime
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import families  # noqa: E402

INPUT_SETS = 3
TOKENS = 131072
HIDDEN = 4096
CONTROL = "causal_as_flashmask"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--families", default=",".join(families.FAMILIES + (CONTROL,)),
                        help=f"comma-separated families of docs/masks.md, or {CONTROL}")
    parser.add_argument("--tiles", default="",
                        help="comma-separated shapes forced besides the automatic choice, "
                             "e.g. 128x128x12:warpgroups,64x128x8:warpgroups")
    parser.add_argument("--mode", default="fwd", choices=("fwd", "fwd+bwd"),
                        help="the forward alone (default) or a training step's forward and "
                             "backward (automatic tiles only)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the markdown report here")
    args = parser.parse_args(argv)
    args.families = args.families.split(",")
    accepted = families.FAMILIES + (CONTROL,)
    for family in args.families:
        if family not in accepted:
            parser.error(f"--families: got {family!r}; accepted: {', '.join(accepted)}")
    args.tiles = [t for t in args.tiles.split(",") if t]
    if args.mode == "fwd+bwd" and args.tiles:
        parser.error(f"--tiles: got {','.join(args.tiles)} with --mode fwd+bwd; accepted: none "
                     "(tiles= forces the forward's shape only)")
    if args.seqlen <= 0 or TOKENS % args.seqlen != 0:
        parser.error(f"--seqlen: got {args.seqlen}; accepted: a divisor of {TOKENS}")
    if args.head_dim <= 0 or HIDDEN % args.head_dim != 0:
        parser.error(f"--head-dim: got {args.head_dim}; accepted: a divisor of {HIDDEN}")
    if args.runs < 1 or args.warmup < 0:
        parser.error(f"--runs / --warmup: got {args.runs} / {args.warmup}; accepted: >= 1 / >= 0")
    return args


def problem(args):
    """(batch, heads) of the protocol for the sequence length and head dim."""
    return TOKENS // args.seqlen, HIDDEN // args.head_dim


def mask_arguments(torch, attnjit, family, args, q):
    """(mask, causal, startend_row_indices, visible pairs) of one family for attnjit.forward."""
    batch, heads = problem(args)
    s = args.seqlen
    if family == "full":
        return "none", False, None, batch * heads * s * s
    if family == "causal":
        return "causal", False, None, batch * heads * s * (s + 1) // 2
    if family == CONTROL:
        indices = torch.full((batch, 1, s, 1), s, device=q.device, dtype=torch.int32)
        return "flashmask", True, indices, batch * heads * s * (s + 1) // 2
    mask_heads = families.mask_heads_of(family, heads)
    params = families.parameters(family, s, batch, mask_heads, args.seed)
    mask = attnjit.flashmask(family, s, batch=batch, heads=mask_heads, **params)
    kind, causal, indices = mask.attention_arguments(q, False, None)
    return kind, causal, indices, mask.visible_pairs(heads)


def measure(args):
    """Rows of (family, tiles, visible fraction, ms, TFLOP/s) and the device name."""
    import torch

    import attnjit
    import measure
    import timing

    batch, heads = problem(args)
    shape = (batch, args.seqlen, heads, args.head_dim)
    backward = args.mode == "fwd+bwd"
    torch.manual_seed(args.seed)
    inputs = [tuple(torch.randn(shape, device="cuda", dtype=torch.bfloat16,
                                requires_grad=backward) for _ in range(3))
              for _ in range(INPUT_SETS)]
    # The gradient of o (the forward alone needs none: a gigabyte at 8K x 16 x 4096).
    d_o = torch.randn(shape, device="cuda", dtype=torch.bfloat16) if backward else None
    q = inputs[0][0]
    rows = []
    for family in args.families:
        kind, causal, indices, pairs = mask_arguments(torch, attnjit, family, args, q)
        base = attnjit._spec_text(q, q, kind, causal, indices, False, None, None)
        for tiles in ["auto"] + args.tiles:
            spec = base if tiles == "auto" else f"{base} tiles={tiles}"

            if backward:
                # compare.py's timed unit: attnjit.attention and o.backward(dO), fresh grads.
                run = measure.step(
                    lambda q, k, v, kind=kind, causal=causal, indices=indices: attnjit.attention(
                        q, k, v, mask=kind, causal=causal, startend_row_indices=indices),
                    d_o, True)
            else:
                def run(q, k, v, spec=spec, indices=indices):
                    attnjit.forward(q, k, v, spec=spec, startend_row_indices=indices)

            ms = timing.median_ms(run, inputs, args.warmup, args.runs)
            flops = (3.5 if backward else 1.0) * 4 * args.head_dim * pairs
            rows.append(dict(family=family, tiles=tiles,
                             visible=pairs / (batch * heads * args.seqlen ** 2), ms=ms,
                             tflops=flops / ms / 1e9))
            print(f"{family} {tiles}: {ms:.3f} ms", file=sys.stderr, flush=True)
    return rows, torch.cuda.get_device_name()


def report(args, device, rows):
    batch, heads = problem(args)
    command = "python3 tools/bench/family_tiles.py " + shlex.join(sys.argv[1:])
    backward = args.mode == "fwd+bwd"
    title = "forward+backward" if backward else "forward by tile shape"
    step = ("a training step's forward (with LSE) and o.backward(dO), FLOPs = "
            "3.5*4*B*H*D*visible pairs" if backward
            else "no LSE; FLOPs = 4*B*H*D*visible pairs")
    lines = [f"## attnjit {title}: {device}", "",
             f"{datetime.datetime.now():%Y-%m-%d %H:%M}; `{command}`", "",
             f"bf16, S={args.seqlen}, B={batch}, H={heads}, D={args.head_dim}, {step}; "
             f"compare.py's masks (seed {args.seed}); median of {args.runs} runs after "
             f"{args.warmup} warm-up "
             f"over {INPUT_SETS} rotating input sets (CUDA events); "
             "vs auto = ms / the automatic choice's ms", "",
             "| family (visible) | tiles | ms | TFLOP/s | vs auto |",
             "|---|---|---:|---:|---:|"]
    auto = {r["family"]: r["ms"] for r in rows if r["tiles"] == "auto"}
    for r in rows:
        ratio = r["ms"] / auto[r["family"]] if r["family"] in auto else float("nan")
        lines.append(f"| {r['family']} ({100 * r['visible']:.1f}%) | {r['tiles']} | "
                     f"{r['ms']:.3f} | {r['tflops']:.0f} | {ratio:.3f} |")
    return "\n".join(lines) + "\n"


def main():
    args = parse_args()
    rows, device = measure(args)
    text = report(args, device, rows)
    if args.out:
        Path(args.out).write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
