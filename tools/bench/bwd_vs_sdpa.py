#!/usr/bin/env python3
"""attnjit forward+backward against its peers, side by side in one process on one GPU.

bf16 q, k [B, S, H, D] and v [B, S, H, Dv] (defaults B=1, H=16, S=8192, D=Dv=128) for four
masks:
- none and causal: attnjit (deterministic=False, and True as an extra row), SDPA flash (or
  SDPA efficient where Dv != D: flash takes equal head dims only), SDPA cuDNN (when
  available) and compiled FlexAttention (block mask for causal);
- causal document (FlashMask causal, 1 column, LTS_j = end of j's document; 3-7 documents of
  random lengths per sample) and share question (FlashMask causal, 1 column; samples of a
  question and 2-4 answers packed as documents; question columns: LTS = end of the sample,
  answer columns: LTS = end of the answer): attnjit, SDPA with the equivalent dense boolean
  mask (the backend SDPA picks for it) and FlexAttention with the same rule as a mask_mod.

Each implementation is first checked against a reference on the same inputs (SDPA flash, or
efficient, for none/causal, SDPA with the dense mask otherwise): relative errors of o, dq, dk,
dv must be <= 2e-2, else the row is marked WRONG and the script exits 1 after the report. Then
it times forward alone and forward+backward (o.backward(dO) with one fixed random dO) with CUDA
events: warm-up, median of --runs, rotating among 3 input sets. FLOPs count visible (query,
key) pairs: forward 2·B·H·(D + Dv)·pairs, backward 2.5x forward. Prints a markdown report last
(and writes it to --out).

    python3 tools/bench/bwd_vs_sdpa.py --batch 1 --heads 16 --seqlen 8192 --head-dim 128 \\
        --out bwd_results.md
    python3 tools/bench/bwd_vs_sdpa.py --batch 2 --seqlen 4096 --head-dim 192 --head-dim-v 128
"""

import contextlib
import datetime
import shlex
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import attnjit  # noqa: E402
from timing import median_ms, problem_parser, publish  # noqa: E402

MAX_RELATIVE_ERROR = 2e-2
INPUT_SETS = 3
BACKWARD_FLOPS_FACTOR = 2.5
MASKS = ("none", "causal", "causal document", "share question")
compiled_flex = torch.compile(flex_attention)


def parse_args():
    parser = problem_parser(__doc__.split("\n\n")[0], warmup=5)
    parser.add_argument("--seed", type=int, default=0, help="seeds inputs and document lengths")
    parser.add_argument("--head-dim-v", type=int, default=None,
                        help="V's and the output's head dim (default: --head-dim)")
    args = parser.parse_args()
    if args.runs < 30:
        parser.error("--runs: at least 30")
    if args.head_dim_v is None:
        args.head_dim_v = args.head_dim
    return args


def random_cuts(length, pieces, generator):
    """`pieces - 1` distinct sorted cut points in [1, length): boundaries of nonempty pieces."""
    return (torch.randperm(length - 1, generator=generator)[:pieces - 1] + 1).sort().values


def causal_document_lts(seqlen, generator):
    """LTS [S] of one sample: 3-7 documents; column j is hidden from rows past its document."""
    count = int(torch.randint(3, 8, (), generator=generator))
    ends = torch.cat([random_cuts(seqlen, count, generator), torch.tensor([seqlen])])
    document = torch.searchsorted(ends, torch.arange(seqlen), right=True)
    return ends[document]


def share_question_lts(seqlen, generator):
    """LTS [S] of one 8K sequence packing 3-7 samples, each a question then 2-4 answers:
    question columns are seen by their whole sample, answer columns only by their answer."""
    count = int(torch.randint(3, 8, (), generator=generator))
    sample_ends = torch.cat([random_cuts(seqlen, count, generator), torch.tensor([seqlen])])
    segment_ends, segment_lts, start = [], [], 0
    for end in sample_ends.tolist():
        answers = int(torch.randint(2, 5, (), generator=generator))
        ends = (start + torch.cat([random_cuts(end - start, answers + 1, generator),
                                   torch.tensor([end - start])])).tolist()
        segment_ends += ends
        segment_lts += [end] + ends[1:]
        start = end
    segment = torch.searchsorted(torch.tensor(segment_ends), torch.arange(seqlen), right=True)
    return torch.tensor(segment_lts)[segment]


def flashmask_vectors(mask, batch, seqlen, generator, device):
    """startend_row_indices int32 [B, 1, S, 1] of a causal FlashMask family."""
    build = causal_document_lts if mask == "causal document" else share_question_lts
    lts = torch.stack([build(seqlen, generator) for _ in range(batch)])
    return lts[:, None, :, None].to(device=device, dtype=torch.int32)


def dense_visible(lts):
    """The bool mask [B, 1, S, S] of causal FlashMask vectors: row i sees column j iff
    j <= i < LTS_j (True = takes part in attention, SDPA's convention)."""
    seqlen = lts.shape[2]
    rows = torch.arange(seqlen, device=lts.device)[:, None]
    cols = torch.arange(seqlen, device=lts.device)[None, :]
    return (cols <= rows) & (rows < lts[:, :, None, :, 0])


def flashmask_block_mask(lts, batch, seqlen):
    """FlexAttention's BlockMask for causal FlashMask vectors (the rule of dense_visible)."""
    columns = lts[:, 0, :, 0]

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx < columns[b, kv_idx])

    return create_block_mask(mask_mod, batch, None, seqlen, seqlen, device=lts.device)


def forward_backward(attention, d_o):
    """A step timing attention's forward and o.backward(d_o) (fresh gradients each call)."""
    def step(q, k, v):
        q.grad = k.grad = v.grad = None
        attention(q, k, v).backward(d_o)
    return step


def outputs_and_grads(attention, q, k, v, d_o):
    """o, dq, dk, dv of one forward+backward."""
    q.grad = k.grad = v.grad = None
    o = attention(q, k, v)
    o.backward(d_o)
    return [o.detach(), q.grad, k.grad, v.grad]


def relative_errors(got, reference):
    """||a - r|| / ||r|| in fp32 for o, dq, dk, dv."""
    return [((a.float() - r.float()).norm() / r.float().norm()).item()
            for a, r in zip(got, reference)]


def training_inputs(shape, head_dim_v):
    """INPUT_SETS random bf16 (q, k, v) sets that require grad, q and k of `shape`, v of
    `shape` with head_dim_v, and one random dO of v's shape."""
    shapes = (shape, shape, shape[:-1] + (head_dim_v,))
    inputs = [tuple(torch.randn(one, dtype=torch.bfloat16, device="cuda").requires_grad_()
                    for one in shapes) for _ in range(INPUT_SETS)]
    return inputs, torch.randn(shapes[2], dtype=torch.bfloat16, device="cuda")


def check_and_time(attention, inputs, d_o, reference, args):
    """(relative errors of o, dq, dk, dv against `reference` on the first input set, median
    forward ms, median forward+backward ms)."""
    errors = relative_errors(outputs_and_grads(attention, *inputs[0], d_o), reference)
    forward_ms = median_ms(attention, inputs, args.warmup, args.runs)
    total_ms = median_ms(forward_backward(attention, d_o), inputs, args.warmup, args.runs)
    return errors, forward_ms, total_ms


def failed_check(error):
    """The check column of an implementation that raised `error`."""
    first_line = (str(error).splitlines() or [""])[0][:160].replace("|", "/")
    return f"failed: {type(error).__name__}: {first_line}"


def timed(forward_ms, total_ms, forward_flops):
    """The times and TFLOP/s of a row, forward and forward+backward."""
    return dict(forward_ms=forward_ms, total_ms=total_ms,
                forward_tflops=forward_flops / (forward_ms * 1e-3) / 1e12,
                total_tflops=(1 + BACKWARD_FLOPS_FACTOR) * forward_flops /
                (total_ms * 1e-3) / 1e12)


def in_bhsd(function):
    """A peer taking [B, H, S, D] as an attention on attnjit's [B, S, H, D] views."""
    def attention(q, k, v):
        return function(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
    return attention


def attnjit_attention(causal, lts, deterministic):
    """attnjit.attention with the mask arguments of one benchmark mask."""
    if lts is None:
        mask_arguments = dict(causal=causal)
    else:
        mask_arguments = dict(mask="flashmask", causal=True, startend_row_indices=lts)
    return lambda q, k, v: attnjit.attention(q, k, v, deterministic=deterministic,
                                             **mask_arguments)


def implementations(mask, lts, visible, args):
    """(name, attention on [B, S, H, D], SDPA backend or None) for one mask; lts and visible
    (its dense form) are None for none/causal."""
    causal = mask == "causal"
    rows = [("attnjit", attnjit_attention(causal, lts, False), None),
            ("attnjit deterministic", attnjit_attention(causal, lts, True), None)]
    if lts is None:
        sdpa = in_bhsd(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        if args.head_dim == args.head_dim_v:
            rows.append(("SDPA flash", sdpa, SDPBackend.FLASH_ATTENTION))
        else:
            rows.append(("SDPA efficient", sdpa, SDPBackend.EFFICIENT_ATTENTION))
        rows.append(("SDPA cuDNN", sdpa, SDPBackend.CUDNN_ATTENTION))
        block_mask = None
        if causal:
            block_mask = create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx <= q_idx, None,
                                           None, args.seqlen, args.seqlen, device="cuda")
    else:
        rows.append(("SDPA dense mask", in_bhsd(
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=visible)), None))
        block_mask = flashmask_block_mask(lts, args.batch, args.seqlen)
    rows.append(("FlexAttention",
                 in_bhsd(lambda q, k, v: compiled_flex(q, k, v, block_mask=block_mask)), None))
    return rows


def backend(kind):
    """The SDPA backend context of an implementation (a no-op context for None)."""
    return sdpa_kernel(kind) if kind is not None else contextlib.nullcontext()


def bench_mask(mask, args, inputs, d_o, generator, rows, failures):
    b, s, h = args.batch, args.seqlen, args.heads
    lts = visible = None
    if mask in ("none", "causal"):
        pairs = b * (s * (s + 1) // 2 if mask == "causal" else s * s)
        reference_name = "SDPA flash" if args.head_dim == args.head_dim_v else "SDPA efficient"
    else:
        lts = flashmask_vectors(mask, b, s, generator, "cuda")
        visible = dense_visible(lts)
        pairs = int(visible.sum().item())
        reference_name = "SDPA dense mask"
    forward_flops = 2 * h * (args.head_dim + args.head_dim_v) * pairs
    density = pairs / (b * s * s)
    impls = implementations(mask, lts, visible, args)

    _, reference_fn, reference_backend = next(i for i in impls if i[0] == reference_name)
    with backend(reference_backend):
        reference = outputs_and_grads(reference_fn, *inputs[0], d_o)

    for name, attention, kind in impls:
        print(f"  {mask}: {name}", file=sys.stderr, flush=True)
        try:
            with backend(kind):
                errors, forward_ms, total_ms = check_and_time(attention, inputs, d_o, reference,
                                                              args)
        except Exception as error:  # one implementation failing must not hide the others
            check = failed_check(error)
            if name.startswith("attnjit"):
                failures.append(f"{mask} {name}: {check}")
            rows.append(dict(mask=mask, name=name, density=density, check=check))
            continue
        check = "" if name == reference_name else \
            "rel " + " / ".join(f"{e:.1e}" for e in errors)
        if not all(e <= MAX_RELATIVE_ERROR for e in errors):
            failures.append(f"{mask} {name}: relative errors o/dq/dk/dv {errors} vs "
                            f"{reference_name} (limit {MAX_RELATIVE_ERROR})")
            check = f"WRONG: {check}"
        rows.append(dict(mask=mask, name=name, density=density, check=check,
                         **timed(forward_ms, total_ms, forward_flops)))


def speedup_over(timed, ours, names):
    """attnjit's fwd+bwd speed over the first peer of `names` that was timed, as text."""
    peer = next((timed[name] for name in names if name in timed), None)
    return f"{peer['total_ms'] / ours['total_ms']:.2f}x" if peer else "-"


def report(args, rows, failures, seconds):
    command = "python3 " + " ".join(shlex.quote(arg) for arg in sys.argv)
    attnjit_ms = {row["mask"]: row["total_ms"] for row in rows
                  if row["name"] == "attnjit" and "total_ms" in row}
    lines = [
        f"## attnjit forward+backward vs SDPA / FlexAttention: {torch.cuda.get_device_name()}",
        "",
        f"torch {torch.__version__}, attnjit {attnjit.version()}, "
        f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; `{command}` ({seconds:.0f} s, "
        "compiles included)",
        "",
        f"bf16, B={args.batch} H={args.heads} S={args.seqlen} D={args.head_dim} "
        f"Dv={args.head_dim_v}; median of "
        f"{args.runs} runs over {INPUT_SETS} rotating input sets (CUDA events); `o.backward(dO)` "
        "with a fixed random dO; FLOPs count visible pairs: forward 2·B·H·(D + Dv)·pairs, "
        f"backward {BACKWARD_FLOPS_FACTOR}x forward; \"attnjit speedup\" = this row's fwd+bwd "
        "time / attnjit's; check = relative errors of o / dq / dk / dv against SDPA flash or "
        "efficient (none, causal) or SDPA with the dense mask; SDPA with a dense mask runs the "
        "backend SDPA picks",
        "",
        "| mask (visible) | implementation | fwd ms | fwd TFLOP/s | fwd+bwd ms | "
        "fwd+bwd TFLOP/s | attnjit speedup | check |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        mask = f"{row['mask']} ({row['density']:.1%})"
        if "total_ms" not in row:
            lines.append(f"| {mask} | {row['name']} | - | - | - | - | - | {row['check']} |")
            continue
        ours = attnjit_ms.get(row["mask"])
        speedup = f"{row['total_ms'] / ours:.2f}x" if ours else "-"
        lines.append(f"| {mask} | {row['name']} | {row['forward_ms']:.2f} | "
                     f"{row['forward_tflops']:.0f} | {row['total_ms']:.2f} | "
                     f"{row['total_tflops']:.0f} | {speedup} | {row['check']} |")

    lines += ["", "| mask | attnjit fwd+bwd TFLOP/s | vs SDPA (flash, efficient or dense mask) | "
              "vs SDPA cuDNN | vs FlexAttention |", "|---|---:|---:|---:|---:|"]
    for mask in MASKS:
        timed = {row["name"]: row for row in rows if row["mask"] == mask and "total_ms" in row}
        ours = timed.get("attnjit")
        if ours is None:
            lines.append(f"| {mask} | failed | - | - | - |")
            continue
        ratios = [speedup_over(timed, ours, names) for names in
                  (("SDPA flash", "SDPA efficient", "SDPA dense mask"), ("SDPA cuDNN",),
                   ("FlexAttention",))]
        lines.append(f"| {mask} | {ours['total_tflops']:.0f} | {' | '.join(ratios)} |")
    lines += ["", "Goal: attnjit at least 5x SDPA with the dense mask on the FlashMask masks."]
    if failures:
        lines += ["", "**FAILED correctness checks:**"] + [f"- {failure}" for failure in failures]
    return "\n".join(lines) + "\n"


def main():
    started = time.perf_counter()
    args = parse_args()
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    shape = (args.batch, args.seqlen, args.heads, args.head_dim)
    inputs, d_o = training_inputs(shape, args.head_dim_v)

    rows, failures = [], []
    for mask in MASKS:
        print(f"benchmarking mask={mask} ...", file=sys.stderr, flush=True)
        bench_mask(mask, args, inputs, d_o, generator, rows, failures)

    text = report(args, rows, failures, time.perf_counter() - started)
    publish(text, args.out, failures)


if __name__ == "__main__":
    main()
