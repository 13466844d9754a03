#!/usr/bin/env python3
"""attnjit forward against its peers, side by side in one process on one GPU.

For mask in (none, causal) on random bf16 q, k, v [B, S, H, D]: attnjit (auto tiles and each
--tiles shape), torch SDPA with the flash and the cuDNN backend, and compiled FlexAttention.
Checks attnjit against SDPA-flash first, then times each with CUDA events (warm-up, median of
--runs, rotating among 3 input sets so no run finds its inputs in L2). Also measures attnjit's
first-call latency from a cold compile, a disk-cache hit and a memory-cache hit. Prints a
markdown report last (and writes it to --out).

    python3 tools/bench/fwd_vs_sdpa.py --batch 1 --heads 16 --seqlen 8192 --head-dim 128 \
        --tiles 128x64x8,128x128x8:q_registers --out results.md
"""

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
from measure import empty_cache_dir  # noqa: E402
from timing import median_ms, problem_parser, publish  # noqa: E402

MAX_RELATIVE_ERROR = 2e-2
INPUT_SETS = 3
compiled_flex = torch.compile(flex_attention)


def parse_args():
    parser = problem_parser(__doc__.split("\n\n")[0], warmup=10)
    parser.add_argument("--tiles", default="", help="comma-separated BMxBNxW[:LAYOUT] shapes")
    args = parser.parse_args()
    if args.runs < 30:
        parser.error("--runs: at least 30")
    return args


def attnjit_spec(mask, head_dim, tiles):
    spec = f"dtype=bf16 head_dim={head_dim} mask={mask}"
    return spec if tiles == "auto" else f"{spec} tiles={tiles}"


def first_call_latencies(spec, inputs, out):
    """(cache level, compile() ms, compile() + first forward ms) for a cold compile into a fresh
    cache directory, a disk hit and a memory hit."""
    rows = []
    with empty_cache_dir():
        for clear_memory in (True, True, False):
            if clear_memory:
                attnjit.clear_cache(memory=True)
            torch.cuda.synchronize()
            start = time.perf_counter()
            kernel = attnjit.Kernel.compile(spec)
            compiled = time.perf_counter()
            kernel.run(*inputs, out)
            torch.cuda.synchronize()
            done = time.perf_counter()
            rows.append((kernel.info()["cache"], (compiled - start) * 1e3, (done - start) * 1e3))
    if [row[0] for row in rows] != ["miss", "disk", "memory"]:
        raise SystemExit(f"first-call latency: unexpected cache levels {[r[0] for r in rows]}")
    return rows


def compare(out, reference):
    """Max abs difference and relative error ||out - ref|| / ||ref|| (fp32)."""
    diff = out.float() - reference.float()
    return diff.abs().max().item(), (diff.norm() / reference.float().norm()).item()


def bench_mask(args, mask, inputs, rows, failures):
    causal = mask == "causal"
    b, s, h, d = args.batch, args.seqlen, args.heads, args.head_dim
    pairs = s * (s + 1) // 2 if causal else s * s
    flops = 4 * b * h * d * pairs
    bhsd = [tuple(t.transpose(1, 2) for t in qkv) for qkv in inputs]

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        reference = sdpa(*bhsd[0]).transpose(1, 2)
        flash_ms = median_ms(sdpa, bhsd, args.warmup, args.runs)

    def add(name, ms, check=""):
        check = check.splitlines()[0][:160].replace("|", "/") if check else ""
        rows.append((mask, name, ms, flops / (ms * 1e-3) / 1e12 if ms else None, check))

    out = torch.empty_like(inputs[0][0])
    for tiles in ["auto"] + [t for t in args.tiles.split(",") if t]:
        spec = attnjit_spec(mask, d, tiles)
        try:
            kernel = attnjit.compile(spec)
            kernel.run(*inputs[0], out)
        except (attnjit.AttnjitError, attnjit.DeviceError) as error:
            if tiles == "auto":
                raise
            add(f"attnjit {tiles}", None, f"rejected: {error}")
            continue
        max_abs, relative = compare(out, reference)
        check = f"max abs {max_abs:.2e}, rel {relative:.2e}"
        if not relative <= MAX_RELATIVE_ERROR:
            failures.append(f"{mask} attnjit {tiles}: {check} (limit rel {MAX_RELATIVE_ERROR})")
            check = f"WRONG: {check}"
        ms = median_ms(lambda q, k, v: kernel.run(q, k, v, out), inputs, args.warmup, args.runs)
        add(f"attnjit {tiles}", ms, check)
    add("SDPA flash", flash_ms)

    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            add("SDPA cuDNN", median_ms(sdpa, bhsd, args.warmup, args.runs))
    except RuntimeError as error:
        add("SDPA cuDNN", None, f"unavailable: {error}")

    block_mask = None
    if causal:
        block_mask = create_block_mask(lambda b_, h_, q_idx, kv_idx: q_idx >= kv_idx, None, None,
                                       s, s, device=inputs[0][0].device)
    try:
        ms = median_ms(lambda q, k, v: compiled_flex(q, k, v, block_mask=block_mask), bhsd,
                       args.warmup, args.runs)
        add("FlexAttention", ms)
    except Exception as error:  # a peer failing to build must not hide the other results
        add("FlexAttention", None, f"failed: {type(error).__name__}: {error}")


def report(args, rows, latencies, failures):
    command = "python3 " + " ".join(shlex.quote(arg) for arg in sys.argv)
    flash = {mask: ms for mask, name, ms, _, _ in rows if name == "SDPA flash"}
    # Recent torch can swap SDPA's flash kernels for a registered FA3/FA4; None is the built-in.
    current_impl = getattr(torch.nn.attention, "current_flash_attention_impl", lambda: None)()
    lines = [
        f"## attnjit forward vs SDPA: {torch.cuda.get_device_name()}",
        "",
        f"torch {torch.__version__}, attnjit {attnjit.version()}, "
        f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; SDPA flash implementation: "
        f"{current_impl or 'built-in'}; `{command}`",
        "",
        f"bf16, B={args.batch} H={args.heads} S={args.seqlen} D={args.head_dim}; median of "
        f"{args.runs} runs over {INPUT_SETS} rotating input sets (CUDA events); FLOPs = "
        "4·B·H·D·(unmasked pairs)",
        "",
        "| mask | implementation | ms | TFLOP/s | speed vs SDPA flash | check vs SDPA flash |",
        "|---|---|---:|---:|---:|---|",
    ]
    for mask, name, ms, tflops, check in rows:
        if ms is None:
            lines.append(f"| {mask} | {name} | - | - | - | {check} |")
        else:
            lines.append(f"| {mask} | {name} | {ms:.3f} | {tflops:.0f} | "
                         f"{flash[mask] / ms:.2f} | {check} |")
    lines += ["", "| attnjit first call (causal, auto) | compile() ms | compile + forward ms |",
              "|---|---:|---:|"]
    lines += [f"| {level} | {compile_ms:.1f} | {total_ms:.1f} |"
              for level, compile_ms, total_ms in latencies]
    if failures:
        lines += ["", "**FAILED correctness checks:**"] + [f"- {failure}" for failure in failures]
    return "\n".join(lines) + "\n"


def main():
    args = parse_args()
    torch.manual_seed(0)
    shape = (args.batch, args.seqlen, args.heads, args.head_dim)
    inputs = [tuple(torch.randn(shape, dtype=torch.bfloat16, device="cuda") for _ in range(3))
              for _ in range(INPUT_SETS)]

    latencies = first_call_latencies(attnjit_spec("causal", args.head_dim, "auto"), inputs[0],
                                     torch.empty_like(inputs[0][0]))
    rows, failures = [], []
    for mask in ("none", "causal"):
        print(f"benchmarking mask={mask} ...", file=sys.stderr, flush=True)
        bench_mask(args, mask, inputs, rows, failures)

    text = report(args, rows, latencies, failures)
    publish(text, args.out, failures)


if __name__ == "__main__":
    main()
