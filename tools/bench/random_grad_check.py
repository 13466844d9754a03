#!/usr/bin/env python3
"""Randomized forward and backward checks through the Python binding on a CUDA device: problems
drawn at random, each run by attnjit.attention (o, then dq, dk, dv of loss = (o * dO).sum())
against plain torch attention in fp32 on a dense mask made from the family's own rule.

Each case draws one of the twelve mask families of the benchmark protocol (families.py: its
parameters at a random seed; attnjit's FlashMask vectors from attnjit.flashmask, the dense
mask from the family's mask_mod, so the two are made independently), a dtype, a head dim
(64, 96, 128, 192, 256), a batch, query and key/value heads (MHA, GQA, MQA), a length that is
rarely a tile multiple, deterministic or atomic dQ, and the score modifiers (softcap, ALiBi).
Each of o, dq, dk, dv must meet FlashAttention's criterion (tools/python/tests/
test_autograd_gpu.py): max|attnjit - ref| <= 2 max|torch_lowp - ref| + 1e-3 max|ref|, with
torch_lowp the same torch computation in the dtype, and compare.py's: ||attnjit - ref|| /
||ref|| <= 0.02 (the first alone is loose where torch's own low-precision error is large, as
with ALiBi's bias in bf16 at long distances). dq's and dk's limits add the fp32 rounding a
kernel carries where dS = P (dP - D) cancels (cancellation_bounds; tests/support/
reference_backward.hpp's model): where every visible row sees one key the reference's dq and dk
are exactly 0, and torch's low-precision ones too. The same --seed draws the same cases.

    tools/bench/random_grad_check.py --cases 30 --seed 1 [--max-seqlen 2048] [--out table.md]

Needs PyTorch and a CUDA device (ATTNJIT_LIBRARY may name the library); prints one line per
case and a table last; exits 1 if any case fails.
"""

import argparse
import math
import random
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parents[1] / "tools" / "python"))
sys.path.insert(0, str(BENCH.parents[1] / "tools" / "python" / "tests"))

import families  # noqa: E402
import random_check  # noqa: E402

HEAD_DIMS = (64, 96, 128, 192, 256)
DTYPES = ("bfloat16", "float16")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=30, help="problems to draw (default 30)")
    random_check.add_draw_options(parser, 2048, "the longest sequence drawn (default 2048; the "
                                  "fp32 reference holds B x H x S x S scores)")
    args = parser.parse_args(argv)
    random_check.check_draw_options(parser, args, min_seqlen=16)
    return args


def draw_case(rng, max_seqlen):
    """One random problem as a dict (plain values: the draw needs no torch)."""
    kv_heads = rng.choice((1, 2, 4))
    case = {
        "family": rng.choice(families.FAMILIES),
        "dtype": rng.choice(DTYPES),
        "head_dim": rng.choice(HEAD_DIMS),
        "batch": rng.randint(1, 2),
        "kv_heads": kv_heads,
        "heads": kv_heads * rng.choice((1, 2, 4)),
        # Short ones a quarter of the time; the families need at least a few tokens.
        "seqlen": rng.randint(16, min(200, max_seqlen)) if rng.random() < 0.25
        else rng.randint(16, max_seqlen),
        "deterministic": rng.random() < 0.3,
        "softcap": rng.choice((None, None, None, 5.0, 30.0)),
        "alibi": rng.random() < 0.2,
        "mask_seed": rng.randrange(2**31),
        "data_seed": rng.randrange(2**31),
    }
    return case


def describe(case):
    extras = [name for name in ("deterministic", "alibi") if case[name]]
    if case["softcap"] is not None:
        extras.append(f"softcap={case['softcap']:g}")
    return (f"{case['family']} {case['dtype']} d{case['head_dim']} B={case['batch']} "
            f"H={case['heads']} Hkv={case['kv_heads']} S={case['seqlen']} "
            f"mask_seed={case['mask_seed']} data_seed={case['data_seed']}"
            + (" " + " ".join(extras) if extras else ""))


def mask_heads(case):
    """FlashMask heads: per KV head for random eviction (its rule reads the head), else 1."""
    return case["kv_heads"] if case["family"] in families.PER_HEAD else 1


MAX_RELATIVE_ERROR = 0.02


def cancellation_bounds(torch, q, k, v, d_o, probabilities, scale):
    """(dq, dk) bounds on the fp32 rounding of dS = P (dP - D) in a kernel, carried through
    dq = scale dS K and dk = scale dS^T Q: dP_ij and D_i are fp32 sums over Dv, rounded to
    about 4 sqrt(Dv) 2^-24 of the magnitudes summed (sum_d |dO_id v_jd|, and sum_j P_ij of
    it); the softcap's derivative is at most 1. Inputs fp32 [B, S, H, D] (k, v per KV head),
    probabilities [B, H, Sq, Sk]."""
    group = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    magnitude = torch.einsum("bqhd,bkhd->bhqk", d_o.abs(), v.abs())
    row = (probabilities * magnitude).sum(-1, keepdim=True)
    ds_error = 4 * math.sqrt(v.shape[-1]) * 2.0 ** -24 * probabilities * (magnitude + row)
    k_max = k.abs().amax(-1).transpose(1, 2)  # [B, H, Sk]
    q_max = q.abs().amax(-1).transpose(1, 2)  # [B, H, Sq]
    dq = scale * (ds_error * k_max[:, :, None, :]).sum(-1).max().item()
    # A KV head's dk adds its group's query heads: at most the group times the largest.
    dk = group * scale * (ds_error * q_max[:, :, :, None]).sum(-2).max().item()
    return dq, dk


def run_case(torch, case):
    """{name: (max error, its limit, relative l2 error)} for o, dq, dk, dv of one case."""
    import attnjit
    import measure
    import peers
    from test_autograd_gpu import random_inputs, torch_attention, with_grads

    device = torch.device("cuda")
    dtype = getattr(torch, case["dtype"])
    family, seqlen, batch = case["family"], case["seqlen"], case["batch"]
    heads, kv_heads, head_dim = case["heads"], case["kv_heads"], case["head_dim"]
    hm = mask_heads(case)
    params = families.parameters(family, seqlen, batch, hm, case["mask_seed"])
    mask = attnjit.flashmask(family, seqlen, batch=batch, heads=hm, **params)
    mask_mod = families.mask_mod(family, params, peers.device_tables(
        families.tables(family, params, seqlen, batch), device))
    if mask_mod is None:
        visible = torch.ones((1, 1, seqlen, seqlen), dtype=torch.bool, device=device)
    else:
        visible = peers.dense_mask(family, mask_mod, batch, hm, seqlen, device)

    generator = torch.Generator().manual_seed(case["data_seed"])
    q, k, v, d_o = random_inputs(generator, device, dtype, batch, seqlen, seqlen, heads, kv_heads,
                                 head_dim)
    slopes = None
    if case["alibi"]:
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)],
                              dtype=torch.float32, device=device)
    softcap = case["softcap"]
    scale = 1 / math.sqrt(head_dim)

    def run_attnjit(q_, k_, v_):
        return attnjit.attention(q_, k_, v_, mask=mask, deterministic=case["deterministic"],
                                 softcap=softcap, alibi_slopes=slopes)

    kept = {}

    def run_torch(q_, k_, v_):
        o, _, kept["probabilities"] = torch_attention(q_, k_, v_, visible, scale, softcap, slopes)
        return o

    got = with_grads(run_attnjit, q, k, v, d_o)
    ref = with_grads(run_torch, q.float(), k.float(), v.float(), d_o.float())
    # The fp32 reference's P (not the low-precision run's, next) bounds the cancellation.
    dq_bound, dk_bound = cancellation_bounds(torch, q.float(), k.float(), v.float(),
                                             d_o.float(), kept.pop("probabilities").detach(),
                                             scale)
    lowp = with_grads(run_torch, q, k, v, d_o)
    kept.clear()
    cancellation = {"o": 0.0, "dq": dq_bound, "dk": dk_bound, "dv": 0.0}
    results = {}
    for name, out, r, low in zip(("o", "dq", "dk", "dv"), got, ref, lowp):
        r = r.float()
        error = (out.float() - r).abs().max().item()
        limit = (2 * (low.float() - r).abs().max().item() + 1e-3 * r.abs().max().item()
                 + cancellation[name])
        results[name] = (error, limit, measure.relative_error(out, r))
    return results


def verdict(results):
    """Whether every error is within its limit and every relative error within
    MAX_RELATIVE_ERROR (a NaN fails)."""
    return all(error <= limit and relative <= MAX_RELATIVE_ERROR
               for error, limit, relative in results.values())


def main(argv=None):
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("random_grad_check: needs a CUDA device")
    rng = random.Random(args.seed)
    print(f"random_grad_check: {args.cases} cases, seed {args.seed} (--seed {args.seed} repeats "
          "them)", flush=True)
    tally, failures = {}, []
    started = time.monotonic()
    for index in range(args.cases):
        case = draw_case(rng, args.max_seqlen)
        text = describe(case)
        try:
            results = run_case(torch, case)
            passed = verdict(results)
            detail = ", ".join(f"{name} {error:.2e} (limit {limit:.2e}, rel {relative:.1e})"
                               for name, (error, limit, relative) in results.items())
        except Exception as error:  # a failure of the case, reported with its message
            passed, detail = False, f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"
        torch.cuda.empty_cache()
        counts = tally.setdefault(case["family"], [0, 0])
        counts[0] += 1
        counts[1] += passed
        print(f"{'PASS' if passed else 'FAIL'} {index + 1}/{args.cases} {text}: {detail}",
              flush=True)
        if not passed:
            failures.append(text)
    title = (f"Randomized forward and backward checks (`tools/bench/random_grad_check.py "
             f"--cases {args.cases} --seed {args.seed} --max-seqlen {args.max_seqlen}`), "
             f"{time.monotonic() - started:.0f} s")
    return random_check.report(title, tally, failures, args.out)


if __name__ == "__main__":
    sys.exit(main())
