#!/usr/bin/env python3
"""Packed documents (varlen): attnjit against PyTorch's varlen_attn and FlexAttention.

--total tokens (default 65536) of documents whose lengths are drawn from an exponential
distribution of mean M (each of --means), packed in one row, causal inside each document
(every document has as many queries as keys). In one process, bf16, forward and
forward+backward:
  attnjit packed     the row as one [1, T, H, D] sample with the causal-document FlashMask
                     vectors, flashmask(causal=true,columns=1): LTS = the end of the key's
                     document;
  attnjit 2-column   the same row with the vectors a varlen call needs when a sequence has
                     fewer queries than keys, flashmask(causal=false,columns=2): LTS = the end
                     of the key's document, UTE = the first query row that sees the key (here
                     the key's own row);
  attnjit varlen     attnjit.attention_varlen on [T, H, D] with one cu_seqlens tensor for queries
                     and keys and causal=True (the interface users call; varlen=shared: its
                     kernels build the one-column vectors from cu_seqlens on the device at each
                     call, which the time includes, and the diagonal runs by index);
  attnjit varlen (separate)  the same with a copy of cu_seqlens for the keys (varlen=true: the
                     two columns a call whose sequences may have Sq != Sk needs);
  varlen_attn        torch.nn.attention.varlen.varlen_attn on [T, H, D] with cu_seqlens
                     (window_size=(-1, 0): causal);
  FlexAttention      compiled flex_attention with a document-causal mask_mod; its BlockMask
                     is made once per length draw, timed apart (median of later calls).
Each implementation is checked against attnjit packed on the first input set: relative errors
of o, dq, dk, dv must be <= 2e-2, else the row is marked WRONG and the script exits 1 after the
report. Times: CUDA events, median of --runs over 3 rotating input sets, o.backward(dO) with a
fixed random dO. FLOPs count visible (query, key) pairs: forward 4·H·D·pairs, backward 2.5x.

--families (e.g. share_question,prefix_lm_document,global_sliding_window,causal_blockwise)
puts a FlashMask family inside each packed sequence instead (the same lengths per mean, one
sample of the family per sequence, parameters at its length n: sequence_parameters):
  attnjit varlen     attnjit.attention_varlen with one cu_seqlens tensor and
                     startend_row_indices [1, 1, T, C]: attnjit.flashmask's vectors of each
                     sequence, concatenated along the keys, rows local to the sequence;
  attnjit varlen (separate)  the same with a copy of cu_seqlens for the keys (varlen=true);
  FlexAttention      the family's mask_mod (families.py) in local positions, inside the
                     document of each packed token; BlockMask made and timed as above.
Each is checked against SDPA with each sequence's dense mask from the same mask_mod, sequence
by sequence; ratios are attnjit varlen's time over the row's.

    python3 tools/bench/varlen_vs_peers.py --means 1024,4096,8192 --out varlen.md
    python3 tools/bench/varlen_vs_peers.py --means 1024,4096,8192 --out varlen_families.md \
        --families share_question,prefix_lm_document,global_sliding_window,causal_blockwise
"""

import argparse
import datetime
import random
import shlex
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "python"))

HEAD_DIMS = (32, 64, 96, 128, 192, 256)
# The families --families takes, each with its parameters at one sequence's length n.
VARLEN_FAMILIES = ("share_question", "prefix_lm_document", "global_sliding_window",
                   "causal_blockwise")
GLOBAL_TOKENS = 64
WINDOW = 512
ANSWERS = 3
BLOCKS = 4


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=65536, help="tokens per row")
    parser.add_argument("--means", default="1024,4096,8192",
                        help="comma-separated mean document lengths, one comparison each")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=None, help="default: --heads")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="seeds the lengths and the inputs")
    parser.add_argument("--families", default="",
                        help="comma-separated FlashMask families to put inside each sequence "
                             f"({', '.join(VARLEN_FAMILIES)}); default: causal documents")
    parser.add_argument("--out", help="also write the markdown report here")
    args = parser.parse_args(argv)
    if args.kv_heads is None:
        args.kv_heads = args.heads
    try:
        args.means = [int(mean) for mean in args.means.split(",")]
    except ValueError:
        parser.error(f"--means: got '{args.means}'; accepted: comma-separated integers")
    for option, value, low in (("--total", args.total, 1), ("--heads", args.heads, 1),
                               ("--kv-heads", args.kv_heads, 1), ("--runs", args.runs, 1),
                               ("--warmup", args.warmup, 0)):
        if value < low:
            parser.error(f"{option}: got {value}; accepted: an integer >= {low}")
    if args.heads % args.kv_heads != 0:
        parser.error(f"--kv-heads: got {args.kv_heads}; accepted: a divisor of --heads "
                     f"({args.heads})")
    if args.head_dim not in HEAD_DIMS:
        parser.error(f"--head-dim: got {args.head_dim}; accepted: "
                     f"{', '.join(map(str, HEAD_DIMS))}")
    for mean in args.means:
        if not 1 <= mean <= args.total:
            parser.error(f"--means: got {mean}; accepted: 1 to --total ({args.total})")
    args.families = [family for family in args.families.split(",") if family]
    for family in args.families:
        if family not in VARLEN_FAMILIES:
            parser.error(f"--families: got '{family}'; accepted: comma-separated names of "
                         f"{', '.join(VARLEN_FAMILIES)}")
    return args


def near_equal(total, count):
    """min(count, total) lengths >= 1 summing to `total`, as equal as can be ([] for 0)."""
    count = min(count, total)
    return [total // count + (1 if i < total % count else 0) for i in range(count)]


def sequence_parameters(family, n):
    """attnjit.flashmask() keyword arguments of `family` for one sequence of n >= 1 tokens (one
    sample, in families.parameters' per-sample form): share_question one document, its question
    n/4 and ANSWERS answers; prefix_lm_document one document with a prefix of n/2;
    global_sliding_window GLOBAL_TOKENS global tokens and WINDOW keys either side;
    causal_blockwise BLOCKS blocks of about n/4, the last one the test block."""
    if family == "share_question":
        question = max(1, n // 4)
        return {"documents": [[[question] + near_equal(n - question, ANSWERS)]]}
    if family == "prefix_lm_document":
        return {"doc_lengths": [[n]], "prefixes": [[max(1, n // 2)]]}
    if family == "global_sliding_window":
        return {"global_tokens": min(GLOBAL_TOKENS, n), "left": WINDOW, "right": WINDOW}
    if family == "causal_blockwise":
        blocks = near_equal(n, BLOCKS)
        return {"blocks": [blocks[:-1]], "test": [blocks[-1]]}
    raise ValueError(f"family: got {family!r}; accepted: {', '.join(VARLEN_FAMILIES)}")


def packed_tables(family, lengths):
    """The per-token tables of `family`'s mask_mod (families.tables) for each sequence of
    `lengths`, one row per sequence padded with 0 to the longest, and the packed row's
    sequence index and local position of every token: (tables, sequence, local), nested
    lists."""
    import families

    longest = max(lengths)
    tables = {}
    for length in lengths:
        one = families.tables(family, sequence_parameters(family, length), length, 1)
        for name, rows in one.items():
            tables.setdefault(name, []).append(rows[0] + [0] * (longest - length))
    sequence = [s for s, length in enumerate(lengths) for _ in range(length)]
    local = [i for length in lengths for i in range(length)]
    return tables, sequence, local


def packed_mask_mod(family, tables, sequence, local):
    """mask_mod(b, h, q, k) of the packed row: q and k in one sequence, and the family's rule
    (families.mask_mod, the sequence index as its sample) in their local positions. `tables`
    from packed_tables, as families.Table or tensors, `sequence` and `local` likewise."""
    import families

    scalars = {"global_tokens": GLOBAL_TOKENS, "left": WINDOW, "right": WINDOW}
    rule = families.mask_mod(family, scalars, tables)
    return lambda b, h, q, k: ((sequence[q] == sequence[k])
                               & rule(sequence[q], h, local[q], local[k]))


def draw_lengths(rng, mean, total):
    """Document lengths >= 1 drawn from an exponential distribution of mean `mean`, the last
    one cut so that they sum to `total`."""
    lengths, used = [], 0
    while used < total:
        length = min(max(1, round(rng.expovariate(1.0 / mean))), total - used)
        lengths.append(length)
        used += length
    return lengths


def offsets(lengths):
    """cu_seqlens: 0, then the running sums of `lengths`."""
    out = [0]
    for length in lengths:
        out.append(out[-1] + length)
    return out


def table_line(row, base):
    """One implementation's line of the report; `base` is the row the ratios divide by (attnjit
    packed's, or attnjit varlen's with --families) of the same lengths (and family)."""
    extra = f" ({row['extra']})" if "extra" in row else ""
    family = f"{row['family']}, " if "family" in row else ""
    cells = [f"{family}{row['mean']} ({row['documents']})", row["name"] + extra]
    if "total_ms" not in row:
        cells += ["-", "-", "-"]
    else:
        cells += [f"{row['forward_tflops']:.0f}", f"{row['total_tflops']:.0f}"]
        if base is None or "total_ms" not in base:
            cells.append("-")
        else:
            cells.append(f"{row['forward_ms'] / base['forward_ms']:.2f}x / "
                         f"{row['total_ms'] / base['total_ms']:.2f}x")
    return "| " + " | ".join(cells + [row["check"]]) + " |"


def main():
    args = parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    import attnjit
    import families
    from bwd_vs_sdpa import (BACKWARD_FLOPS_FACTOR, INPUT_SETS, MAX_RELATIVE_ERROR,
                             check_and_time, failed_check, in_bhsd, outputs_and_grads, timed)
    from peers import timed as host_timed
    from timing import publish

    started = time.perf_counter()
    if args.families:
        # Each family's mask_mod is new code for the compiled create_block_mask and
        # flex_attention; never fall back to their eager forms, which materialize T x T.
        for limit in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                      "accumulated_recompile_limit"):
            try:
                setattr(torch._dynamo.config, limit,
                        max(64, getattr(torch._dynamo.config, limit)))
            except (AttributeError, TypeError, ValueError):  # not a knob of this torch version
                pass
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    device = "cuda"
    compiled_flex = torch.compile(flex_attention, dynamic=False)
    compiled_block_mask = torch.compile(create_block_mask, dynamic=False)
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        varlen_attn = None

    total, heads, kv_heads, dim = args.total, args.heads, args.kv_heads, args.head_dim
    inputs = [tuple(torch.randn((1, total, h, dim), dtype=torch.bfloat16, device=device)
                    .requires_grad_() for h in (heads, kv_heads, kv_heads))
              for _ in range(INPUT_SETS)]
    d_o = torch.randn((1, total, heads, dim), dtype=torch.bfloat16, device=device)

    rows, failures = [], []

    def measure(implementations, reference, forward_flops, block_mask_ms, labels):
        """Checks and times each (name, attention) against `reference`, adding a row each."""
        for name, attention in implementations:
            row = dict(labels, name=name)
            try:
                errors, forward_ms, total_ms = check_and_time(attention, inputs, d_o, reference,
                                                              args)
            except Exception as error:  # a peer that cannot run this problem: reported
                row["check"] = failed_check(error)
                rows.append(row)
                continue
            wrong = max(errors) > MAX_RELATIVE_ERROR
            row["check"] = ("WRONG " if wrong else "") + "rel " + " / ".join(
                f"{e:.1e}" for e in errors)
            if wrong:
                family = f"{labels['family']}, " if "family" in labels else ""
                failures.append(f"{family}mean {labels['mean']}, {name}: {row['check']}")
            row.update(timed(forward_ms, total_ms, forward_flops))
            if name == "FlexAttention":
                row["extra"] = f"BlockMask {block_mask_ms:.1f} ms"
            rows.append(row)

    def documents(mean, lengths, cu_seqlens, cu_seqlens_k, longest):
        """The default comparison: causal documents."""
        packed = attnjit.flashmask("causal_document", seqlen=total, doc_lengths=lengths,
                                   device=device)
        one_column = packed.startend_row_indices
        rows_of_keys = torch.arange(total, dtype=torch.int32, device=device).view(1, 1, total, 1)
        two_columns = torch.cat([one_column, rows_of_keys], dim=-1).contiguous()
        document = torch.repeat_interleave(torch.arange(len(lengths), dtype=torch.int32),
                                           torch.tensor(lengths)).to(device)

        def document_causal(b, h, q, k):
            return (document[q] == document[k]) & (q >= k)

        _, block_mask_ms, block_mask = host_timed(
            lambda: compiled_block_mask(document_causal, None, None, total, total,
                                        device=device), 3)

        implementations = [
            ("attnjit packed", lambda q, k, v: attnjit.attention(
                q, k, v, mask="flashmask", causal=True, startend_row_indices=one_column)),
            ("attnjit 2-column", lambda q, k, v: attnjit.attention(
                q, k, v, mask="flashmask", causal=False, startend_row_indices=two_columns)),
            ("attnjit varlen", lambda q, k, v: attnjit.attention_varlen(
                q.squeeze(0), k.squeeze(0), v.squeeze(0), cu_seqlens, cu_seqlens, longest, longest,
                causal=True).unsqueeze(0)),
            ("attnjit varlen (separate)", lambda q, k, v: attnjit.attention_varlen(
                q.squeeze(0), k.squeeze(0), v.squeeze(0), cu_seqlens, cu_seqlens_k, longest, longest,
                causal=True).unsqueeze(0)),
            ("FlexAttention", in_bhsd(lambda q, k, v: compiled_flex(
                q, k, v, block_mask=block_mask, enable_gqa=kv_heads != heads))),
        ]
        # The packed [T, H, D] calls take squeeze(0) views of the [1, T, H, D] leaves, whose
        # gradients pass back as views (an index q[0] would add a zero fill and a copy per input).
        if varlen_attn is not None:
            implementations.insert(3, ("varlen_attn", lambda q, k, v: varlen_attn(
                q.squeeze(0), k.squeeze(0), v.squeeze(0), cu_seqlens, cu_seqlens, longest, longest,
                window_size=(-1, 0)).unsqueeze(0)))

        forward_flops = 4 * dim * packed.visible_pairs(heads=heads)
        reference = outputs_and_grads(implementations[0][1], *inputs[0], d_o)
        measure(implementations, reference, forward_flops, block_mask_ms,
                dict(mean=mean, documents=len(lengths)))

    def family_inside(family, mean, lengths, cu_seqlens, cu_seqlens_k, longest):
        """--families: `family` inside each sequence, attnjit varlen against FlexAttention,
        both checked against SDPA sequence by sequence."""
        masks = [attnjit.flashmask(family, seqlen=n, **sequence_parameters(family, n))
                 for n in lengths]
        if len({mask.mask_text for mask in masks}) != 1:
            raise AssertionError(f"{family}: the sequences' masks differ in structure")
        vectors = torch.cat([mask.startend_row_indices for mask in masks], dim=2)
        vectors = vectors.to(device).contiguous()
        causal = masks[0].causal
        table_lists, sequence, local = packed_tables(family, lengths)
        tables = {name: torch.tensor(table, dtype=torch.int32, device=device)
                  for name, table in table_lists.items()}
        sequence = torch.tensor(sequence, dtype=torch.int32, device=device)
        local = torch.tensor(local, dtype=torch.int32, device=device)
        mask_mod = packed_mask_mod(family, tables, sequence, local)
        rule = families.mask_mod(family, {"global_tokens": GLOBAL_TOKENS, "left": WINDOW,
                                          "right": WINDOW}, tables)

        _, block_mask_ms, block_mask = host_timed(
            lambda: compiled_block_mask(mask_mod, None, None, total, total, device=device), 3)

        def sequence_by_sequence(q, k, v):
            """SDPA on each sequence with its dense mask (True: visible), [1, T, H, D]."""
            outputs = []
            for s, (start, end) in enumerate(zip(cuts[:-1], cuts[1:])):
                positions = torch.arange(end - start, device=device)
                visible = rule(s, 0, positions[:, None], positions[None, :])
                qs, ks, vs = (t[:, start:end].transpose(1, 2) for t in (q, k, v))
                if kv_heads != heads:
                    ks, vs = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (ks, vs))
                outputs.append(F.scaled_dot_product_attention(qs, ks, vs, attn_mask=visible)
                               .transpose(1, 2))
            return torch.cat(outputs, dim=1)

        cuts = offsets(lengths)
        implementations = [
            ("attnjit varlen", lambda q, k, v: attnjit.attention_varlen(
                q.squeeze(0), k.squeeze(0), v.squeeze(0), cu_seqlens, cu_seqlens, longest, longest,
                causal=causal, startend_row_indices=vectors).unsqueeze(0)),
            ("attnjit varlen (separate)", lambda q, k, v: attnjit.attention_varlen(
                q.squeeze(0), k.squeeze(0), v.squeeze(0), cu_seqlens, cu_seqlens_k, longest,
                longest, causal=causal, startend_row_indices=vectors).unsqueeze(0)),
            ("FlexAttention", in_bhsd(lambda q, k, v: compiled_flex(
                q, k, v, block_mask=block_mask, enable_gqa=kv_heads != heads))),
        ]
        forward_flops = 4 * dim * sum(mask.visible_pairs(heads=heads) for mask in masks)
        reference = outputs_and_grads(sequence_by_sequence, *inputs[0], d_o)
        measure(implementations, reference, forward_flops, block_mask_ms,
                dict(family=families.TITLES[family], mean=mean, documents=len(lengths)))

    for mean in args.means:
        lengths = draw_lengths(rng, mean, total)
        cuts = offsets(lengths)
        print(f"mean {mean}: {len(lengths)} documents ...", file=sys.stderr, flush=True)
        cu_seqlens = torch.tensor(cuts, dtype=torch.int32, device=device)
        cu_seqlens_k = cu_seqlens.clone()
        longest = max(lengths)
        if not args.families:
            documents(mean, lengths, cu_seqlens, cu_seqlens_k, longest)
        for family in args.families:
            print(f"  {family} ...", file=sys.stderr, flush=True)
            family_inside(family, mean, lengths, cu_seqlens, cu_seqlens_k, longest)

    command = "python3 " + " ".join(shlex.quote(arg) for arg in sys.argv)
    if args.families:
        title = "FlashMask families inside packed sequences: attnjit vs FlexAttention"
        problem = (f"the family inside each sequence ({', '.join(args.families)}; parameters "
                   "at each sequence's length: varlen_vs_peers.sequence_parameters)")
        base, checked = "attnjit varlen", "SDPA with each sequence's dense mask"
        first = "family, mean seq (seqs)"
    else:
        title = "Packed documents: attnjit vs varlen_attn and FlexAttention"
        problem = "causal inside each document"
        base, checked = "attnjit packed", "attnjit packed"
        first = "mean doc (docs)"
    lines = [
        f"## {title}, {torch.cuda.get_device_name()}", "",
        f"torch {torch.__version__}, attnjit {attnjit.version()}, "
        f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; `{command}` "
        f"({time.perf_counter() - started:.0f} s, compiles included)", "",
        f"bf16, {total} tokens in one row, H={heads} Hkv={kv_heads} D={dim}, {problem}; "
        f"lengths drawn with seed {args.seed}; median of {args.runs} runs over "
        f"{INPUT_SETS} input sets; FLOPs: forward 4·H·D·pairs, backward "
        f"{BACKWARD_FLOPS_FACTOR}x; ratios: {base}'s time over the row's; check: "
        f"o / dq / dk / dv against {checked}", "",
        f"| {first} | implementation | fwd TFLOP/s | fwd+bwd TFLOP/s | {base} "
        "fwd / fwd+bwd speedup | check |", "|---|---|---:|---:|---:|---|"]
    ours = {(row.get("family"), row["mean"]): row for row in rows if row["name"] == base}
    lines += [table_line(row, ours.get((row.get("family"), row["mean"]))) for row in rows]
    if failures:
        lines += ["", "**FAILED correctness checks:**"] + [f"- {failure}" for failure in failures]
    publish("\n".join(lines) + "\n", args.out, failures)


if __name__ == "__main__":
    main()
