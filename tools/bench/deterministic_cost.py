#!/usr/bin/env python3
"""The cost of attnjit's deterministic backward against its atomic mode, per FlashMask family.

For each head dim and each of the twelve families of docs/masks.md (bf16, compare.py's masks:
same parameters and seed, S x batch with 4096 / D heads), one process on one GPU:
1. forward+backward (o.backward(dO)) in the atomic mode and with deterministic=True, timed with
   CUDA events (warm-up, median of --runs, rotating among 3 input sets);
2. bitwise repeatability: dq, dk and dv of --repeats deterministic steps compared with the
   first (torch.equal); any difference marks the row NOT REPEATABLE and the script exits 1;
   the atomic mode's steps compared the same way, for the log (how often its order shows);
3. the deterministic gradients against the atomic ones (max relative error of dq, dk, dv:
   the same sums in another order, so about bf16 rounding).
Prints the markdown report, the table last; --out writes it.

    python3 tools/bench/deterministic_cost.py --seqlen 8192 --batch 16 --head-dims 128 \\
        --out deterministic.md
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


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--head-dims", default="128",
                        help="comma-separated head dims (hidden 4096: 4096 / D heads)")
    parser.add_argument("--families", default=",".join(families.FAMILIES),
                        help="comma-separated families of docs/masks.md")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3,
                        help="steps compared bitwise with the first, per mode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the markdown report here")
    args = parser.parse_args(argv)
    args.head_dims = [int(d) for d in args.head_dims.split(",")]
    args.families = args.families.split(",")
    for family in args.families:
        if family not in families.FAMILIES:
            parser.error(f"--families: got {family!r}; accepted: {', '.join(families.FAMILIES)}")
    return args


def gradients(attention, q, k, v, d_o):
    q.grad = k.grad = v.grad = None
    attention(q, k, v).backward(d_o)
    out = (q.grad.clone(), k.grad.clone(), v.grad.clone())
    q.grad = k.grad = v.grad = None
    return out


def relative_error(got, reference):
    got, reference = got.double(), reference.double()
    return ((got - reference).norm() / reference.norm().clamp_min(1e-30)).item()


def measure_family(torch, attnjit, timing, args, head_dim, family):
    seqlen, batch, heads = args.seqlen, args.batch, 4096 // head_dim
    mask_heads = families.mask_heads_of(family, heads)
    params = families.parameters(family, seqlen, batch, mask_heads, args.seed)
    mask = attnjit.flashmask(family, seqlen, batch=batch, heads=mask_heads, **params)
    generator = torch.Generator(device="cuda").manual_seed(args.seed)
    shape = (batch, seqlen, heads, head_dim)

    def tensor():
        return torch.randn(shape, dtype=torch.bfloat16, device="cuda", generator=generator)

    inputs = [tuple(tensor().requires_grad_() for _ in range(3)) for _ in range(INPUT_SETS)]
    d_o = tensor()

    def attention(deterministic):
        return lambda q, k, v: attnjit.attention(q, k, v, mask=mask, deterministic=deterministic)

    def step(deterministic):
        run = attention(deterministic)

        def call(q, k, v):
            o = run(q, k, v)
            q.grad = k.grad = v.grad = None
            o.backward(d_o)
        return call

    row = dict(head_dim=head_dim, family=family)
    for deterministic in (False, True):
        name = "deterministic" if deterministic else "atomic"
        row[f"{name}_ms"] = timing.median_ms(step(deterministic), inputs, args.warmup, args.runs)
        first = gradients(attention(deterministic), *inputs[0], d_o)
        differing = 0
        for _ in range(args.repeats):
            again = gradients(attention(deterministic), *inputs[0], d_o)
            differing += any(not torch.equal(a, b) for a, b in zip(again, first))
        row[f"{name}_differing"] = differing
        row[f"{name}_grads"] = first
    row["error"] = max(relative_error(d, a)
                       for d, a in zip(row.pop("deterministic_grads"), row.pop("atomic_grads")))
    return row


def report(args, device, rows):
    lines = [
        "# attnjit: deterministic against atomic backward, per family",
        "",
        f"- device: {device}",
        f"- date: {datetime.date.today().isoformat()}",
        f"- command: `python3 tools/bench/deterministic_cost.py {shlex.join(sys.argv[1:])}`",
        f"- bf16, S={args.seqlen}, batch {args.batch}, 4096 / D heads; forward+backward medians "
        f"of {args.runs} runs after {args.warmup} warm-up, 3 rotating input sets",
        f"- repeats: {args.repeats} steps per mode compared bitwise with the first (dq, dk, dv); "
        "error: max relative error of the deterministic gradients against the atomic ones",
        "",
        "| D | family | atomic ms | deterministic ms | cost | deterministic repeats differing "
        "| atomic repeats differing | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = "" if r["deterministic_differing"] == 0 else " NOT REPEATABLE"
        lines.append(
            f"| {r['head_dim']} | {r['family']} | {r['atomic_ms']:.2f} | "
            f"{r['deterministic_ms']:.2f} | {r['deterministic_ms'] / r['atomic_ms']:.2f}x | "
            f"{r['deterministic_differing']}/{args.repeats}{verdict} | "
            f"{r['atomic_differing']}/{args.repeats} | {r['error']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    import torch

    import attnjit
    import timing

    device = f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    rows = []
    for head_dim in args.head_dims:
        for family in args.families:
            rows.append(measure_family(torch, attnjit, timing, args, head_dim, family))
            r = rows[-1]
            print(f"D={head_dim} {family}: atomic {r['atomic_ms']:.2f} ms, deterministic "
                  f"{r['deterministic_ms']:.2f} ms", file=sys.stderr, flush=True)
            torch.cuda.empty_cache()
    text = report(args, device, rows)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0 if all(r["deterministic_differing"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
