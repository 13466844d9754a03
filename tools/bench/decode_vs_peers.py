#!/usr/bin/env python3
"""Decode against a KV cache: attnjit.attention_with_kvcache against SDPA and FlexAttention.

Sq new tokens per sequence (q [B, Sq, H, D], the last Sq of the sequence's L keys) attend to
a bf16 cache of L keys, in one process on one GPU. For each point of the grid --batches x
--lengths x --new-tokens x --head-dims and each --layouts entry:
  attnjit            attention_with_kvcache on the contiguous cache [B, L, Hkv, D] or a paged
                     pool [pages, page_size, Hkv, D] whose block_table maps each sequence's
                     pages to a random (seeded) permutation of the pool (a layout ending in
                     _hnd stores them as [B, Hkv, L, D] or [pages, Hkv, page_size, D], the
                     peers' layout, and passes the transposed view; one ending in _fp8 holds
                     the cache in e4m3 with a descale per sequence and KV head, its largest
                     |value| at 448, its reference the dequantized cache and its bytes one a
                     value); causal=True when
                     Sq > 1 (bottom-right), --num-splits passed through; timed eagerly and as
                     CUDA-graph replays (one call captured per input set);
  SDPA cuDNN / flash / efficient  F.scaled_dot_product_attention under that backend on
                     [B, H, Sq, D] queries and contiguous [B, Hkv, L, D] copies of the cache,
                     enable_gqa when H != Hkv, is_causal=False (also for Sq > 1: SDPA's
                     causal mask is top-left, not the decode one);
  FlexAttention      flex_attention compiled for static shapes (one compile per point) on the
                     same tensors, no block mask (it picks its decoding kernel for short
                     queries).
The peers run once per (B, L, Sq, D), on the contiguous cache: a paged row's peers are the
fastest on the same logical problem. A peer that raises shows 'failed' and its error's first
line; the run goes on. Bandwidth counts the bytes FA3 counts, B·L·Hkv·(D + Dv)·2 + |q| + |o|,
against a dst.copy_(src) of a 4 GiB tensor measured once (read + write), per CUDA-graph
replay (per eager call where the capture failed). Each attnjit row is
checked against SDPA efficient (Sq = 1, when it ran) or a float32 reference: a max abs
difference above 2e-2 marks it MISMATCH and the script exits 1 after the report.
  --ragged           adds 64 sequences of lengths drawn uniformly from 1 to 32768 (seeded, at
                     least Sq) in each of --layouts (contiguous: capacity the longest),
                     cache_seqlens given; no peers; bandwidth counts each sequence's own keys.
  --window W         adds, at each point with L > W, attnjit with window_size=(W, 0) and
                     causal=True, against the same point's full-cache time.
  --document D       the same with a causal document mask of FlashMask vectors
                     (startend_row_indices, C = 1) instead: documents of D keys counted from
                     each sequence's end, so the new tokens see the last D keys; with
                     --predicate also as an element predicate over a tensor of document ids,
                     attnjit.predicate("doc[q] == doc[k] && k <= q").
  --prefill N        instead of the grid, chunked prefill: N new tokens per sequence at each
                     --batches x --lengths x --head-dims point (L keys, the new ones the last
                     N), causal, in each of --layouts: attention_with_kvcache as the launch
                     chooses (the prefill kernel on sm_90a), the same appending the N keys
                     (k=, v=; cache_seqlens L - N), and the decode kernel (num_splits=1),
                     against attnjit.forward(causal=True) on the contiguous cache (its causal
                     kernel, bottom-right: the same visible pairs); CUDA-graph replays,
                     TFLOP/s as 4 x D x visible pairs; no peers. With --document D, a
                     second table: the launch's choice and the decode kernel with causal
                     document vectors of D keys (rows as positions), against the causal
                     auto time and a float32 reference; with --predicate also rows of the
                     same documents as the element predicate.
Times: median of --runs CUDA-event timings after --warmup calls, rotating among input sets
that together span at least twice the L2 cache (at most 64 sets). The markdown report is
printed last (and written to --out).

    python3 tools/bench/decode_vs_peers.py --out decode.md
    python3 tools/bench/decode_vs_peers.py --batches 1,64 --lengths 32768 --new-tokens 1 \
        --head-dims 128 --layouts contiguous,paged16 --ragged --window 4096 --document 4096 \
        --out decode.md
"""

import argparse
import contextlib
import datetime
import math
import random
import shlex
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "python"))

PEERS = ("SDPA cuDNN", "SDPA flash", "SDPA efficient", "FlexAttention")
PEER_OPTIONS = {"cudnn": "SDPA cuDNN", "flash": "SDPA flash", "efficient": "SDPA efficient",
                "flex": "FlexAttention"}
MAX_DIFF = 2e-2
COPY_BYTES = 4 << 30
RAGGED_SEQUENCES = 64
RAGGED_MAX_LENGTH = 32768
MAX_INPUT_SETS = 64
FALLBACK_L2_BYTES = 50 << 20


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,16,64", help="comma-separated batch sizes")
    parser.add_argument("--lengths", default="1024,8192,32768",
                        help="comma-separated cached lengths L (keys per sequence, new ones "
                             "included)")
    parser.add_argument("--new-tokens", default="1,4", help="comma-separated query lengths Sq")
    parser.add_argument("--head-dims", default="128,64", help="comma-separated head dims")
    parser.add_argument("--layouts", default="contiguous,paged16,paged64",
                        help="comma-separated cache layouts: contiguous or pagedN (N keys a "
                             "page), each NHD or with '_hnd' HND (heads before keys), then "
                             "optionally '_fp8' (an e4m3 cache)")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--peers", default="cudnn,flash,efficient,flex",
                        help=f"comma-separated peers to run ({', '.join(PEER_OPTIONS)})")
    parser.add_argument("--ragged", action="store_true",
                        help=f"add {RAGGED_SEQUENCES} sequences of lengths drawn from 1 to "
                             f"{RAGGED_MAX_LENGTH}")
    parser.add_argument("--window", type=int, default=None,
                        help="add sliding-window rows: window_size=(W, 0), causal")
    parser.add_argument("--document", type=int, default=None,
                        help="add document-mask rows: FlashMask vectors, documents of D keys "
                             "from each sequence's end, causal")
    parser.add_argument("--predicate", action="store_true",
                        help="with --document: also the documents as an element predicate")
    parser.add_argument("--prefill", type=int, default=None,
                        help="instead of the grid: chunked prefill of N new tokens per sequence "
                             "against attnjit's causal forward")
    parser.add_argument("--num-splits", type=int, default=0, help="passed to attnjit (0: auto)")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the inputs, the page permutations and the ragged lengths")
    parser.add_argument("--out", help="also write the markdown report here")
    args = parser.parse_args(argv)

    def integers(option, text, low):
        try:
            values = [int(item) for item in text.split(",")]
        except ValueError:
            values = []
        if not values or min(values) < low:
            parser.error(f"{option}: got '{text}'; accepted: comma-separated integers >= {low}")
        return values

    args.batches = integers("--batches", args.batches, 1)
    args.lengths = integers("--lengths", args.lengths, 1)
    args.new_tokens = integers("--new-tokens", args.new_tokens, 1)
    args.head_dims = integers("--head-dims", args.head_dims, 1)
    args.layouts = args.layouts.split(",")
    for layout in args.layouts:
        if page_size(layout) == 0:
            parser.error(f"--layouts: got '{layout}'; accepted: comma-separated 'contiguous' "
                         "or 'pagedN' with N >= 1, each optionally followed by '_hnd' and "
                         "then '_fp8'")
    names = args.peers.split(",") if args.peers else []
    for name in names:
        if name not in PEER_OPTIONS:
            parser.error(f"--peers: got '{name}'; accepted: comma-separated names of "
                         f"{', '.join(PEER_OPTIONS)}")
    args.peers = [peer for peer in PEERS if peer in {PEER_OPTIONS[name] for name in names}]
    for option, value, low in (("--heads", args.heads, 1), ("--kv-heads", args.kv_heads, 1),
                               ("--runs", args.runs, 1), ("--warmup", args.warmup, 0),
                               ("--num-splits", args.num_splits, 0),
                               ("--window", 1 if args.window is None else args.window, 1),
                               ("--document", 1 if args.document is None else args.document,
                                1),
                               ("--prefill", 1 if args.prefill is None else args.prefill, 1)):
        if value < low:
            parser.error(f"{option}: got {value}; accepted: an integer >= {low}")
    if args.heads % args.kv_heads != 0:
        parser.error(f"--kv-heads: got {args.kv_heads}; accepted: a divisor of --heads "
                     f"({args.heads})")
    if args.prefill is not None and args.prefill > min(args.lengths):
        parser.error(f"--prefill: got {args.prefill}; accepted: at most the shortest of "
                     f"--lengths ({min(args.lengths)})")
    if max(args.new_tokens) > min(args.lengths):
        parser.error(f"--new-tokens: got {max(args.new_tokens)}; accepted: at most the "
                     f"shortest of --lengths ({min(args.lengths)})")
    return args


def page_size(layout):
    """None for 'contiguous', N for 'pagedN', 0 for anything else (either with '_hnd', then
    '_fp8')."""
    layout = layout.removesuffix("_fp8").removesuffix("_hnd")
    if layout == "contiguous":
        return None
    digits = layout[len("paged"):]
    return int(digits) if layout.startswith("paged") and digits.isdigit() else 0


def failed(error):
    """A table cell for an implementation that raised `error`: its first line."""
    first_line = (str(error).splitlines() or [""])[0][:100].replace("|", "/")
    return f"failed: {type(error).__name__}: {first_line}"


def fp8(layout):
    """Whether `layout` holds an e4m3 cache."""
    return layout.endswith("_fp8")


def kv_bytes(lengths, kv_heads, dim, element=2):
    """Bytes of the keys and values of sequences of `lengths` keys (Dv = D, `element` bytes a
    value: 2 for bf16, 1 for e4m3)."""
    return sum(lengths) * kv_heads * (dim + dim) * element


def quantized(cache):
    """(e4m3 values, fp32 descales [B, Hkv], dequantized float32) of a cache [B, L, Hkv, D]:
    each (sequence, KV head)'s largest |value| maps to 448."""
    import torch

    descale = (cache.float().abs().amax(dim=(1, 3)).clamp(min=1e-6) / 448.0).contiguous()
    scale = descale[:, None, :, None]
    values = (cache.float() / scale).to(torch.float8_e4m3fn)
    return values, descale, values.float() * scale


def io_bytes(batch, new_tokens, heads, dim):
    """Bytes of q and o."""
    return 2 * batch * new_tokens * heads * dim * 2


def input_set_count(set_bytes, l2_bytes):
    """How many input sets of `set_bytes` each to rotate among so that they span twice L2."""
    return min(MAX_INPUT_SETS, max(1, math.ceil(2 * l2_bytes / set_bytes)))


def random_sets(count, batch, capacity, new_tokens, heads, kv_heads, dim):
    """`count` tuples (q [B, Sq, H, D], k, v [B, capacity, Hkv, D]) of random bf16."""
    import torch

    def normal(*shape):
        return torch.randn(shape, dtype=torch.bfloat16, device="cuda")

    return [(normal(batch, new_tokens, heads, dim), normal(batch, capacity, kv_heads, dim),
             normal(batch, capacity, kv_heads, dim)) for _ in range(count)]


def paged_cache(k, v, lengths, page, generator):
    """(k_pool, v_pool, block_table): the first lengths[b] keys of each sequence b of the
    contiguous k, v [B, capacity, Hkv, D] in pages of `page` keys, each sequence's pages at
    the places a random permutation of the pool gives (drawn from the CPU `generator`)."""
    import torch

    pages = [math.ceil(n / page) for n in lengths]
    order = torch.randperm(sum(pages), generator=generator).to(k.device)
    shape = (sum(pages), page) + tuple(k.shape[2:])
    k_pool, v_pool = k.new_zeros(shape), v.new_zeros(shape)
    block_table = torch.zeros((len(lengths), max(pages)), dtype=torch.int32, device=k.device)
    first = 0
    for b, (n, count) in enumerate(zip(lengths, pages)):
        places = order[first:first + count]
        first += count
        block_table[b, :count] = places.to(torch.int32)
        full, tail = divmod(n, page)
        for pool, cache in ((k_pool, k), (v_pool, v)):
            pool[places[:full]] = cache[b, :full * page].reshape((full, page) + shape[2:])
            if tail:
                pool[places[full], :tail] = cache[b, full * page:n]
    return k_pool, v_pool, block_table


def document_indices(lengths, capacity, document):
    """Causal FlashMask vectors [B, 1, capacity, 1] of documents of `document` keys counted
    from each sequence's end: key j of a sequence of n keys hides the rows (positions) from its
    document's end on; keys past n hide nothing."""
    import torch

    indices = torch.full((len(lengths), 1, capacity, 1), capacity, dtype=torch.int32)
    for b, n in enumerate(lengths):
        key = torch.arange(n)
        indices[b, 0, :n, 0] = (n - document * ((n - 1 - key) // document)).to(torch.int32)
    return indices.cuda()


def reference_output(q, k, v, lengths, causal, window, document=None):
    """float32 attention of q [B, Sq, H, D] over the first lengths[b] keys of k, v
    [B, capacity, Hkv, D], sequence by sequence, query head h reading key head h // (H / Hkv);
    the Sq queries sit at the last Sq key positions; `causal` hides later keys, a `window`
    (None: none) keys more than `window` positions earlier, a `document` size (None: none)
    the keys of other documents (document_indices)."""
    import torch

    batch, new_tokens, heads, dim = q.shape
    kv_heads = k.shape[2]
    group = heads // kv_heads
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b, n in enumerate(lengths):
        keys = k[b, :n].float().transpose(0, 1)
        values = v[b, :n].float().transpose(0, 1)
        # Rows g * Sq + s of KV head j: query head j * G + g, new token s.
        queries = (q[b].float().view(new_tokens, kv_heads, group, dim).permute(1, 2, 0, 3)
                   .reshape(kv_heads, group * new_tokens, dim))
        scores = queries @ keys.transpose(1, 2) / math.sqrt(dim)
        position = (n - new_tokens + torch.arange(new_tokens, device=q.device)).repeat(group)
        key = torch.arange(n, device=q.device)
        hidden = torch.zeros((group * new_tokens, n), dtype=torch.bool, device=q.device)
        if causal:
            hidden |= key[None, :] > position[:, None]
        if window is not None:
            hidden |= key[None, :] < position[:, None] - window
        if document is not None:
            hidden |= ((n - 1 - key[None, :]) // document) != ((n - 1 - position[:, None])
                                                                // document)
        rows = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1) @ values
        out[b] = (rows.view(kv_heads, group, new_tokens, dim).permute(2, 0, 1, 3)
                  .reshape(new_tokens, heads, dim))
    return out


def graph_replay_ms(call, sets, warmup, runs):
    """Median ms of CUDA-graph replays, one graph capturing call(*set) per input set."""
    import torch

    from timing import median_ms

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            call(*sets[0])
    torch.cuda.current_stream().wait_stream(stream)
    graphs = []
    for inputs in sets:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call(*inputs)
        graphs.append((graph,))
    return median_ms(lambda graph: graph.replay(), graphs, warmup, runs)


def attnjit_layout_sets(sets, lengths, layout, generator):
    """attnjit's argument tuples (q, k, v, cache_seqlens, block_table, k_descale, v_descale)
    for each (q, k, v) of `sets` in `layout` (descales None but for an e4m3 cache)."""
    import torch

    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    page = page_size(layout)
    hnd = layout.removesuffix("_fp8").endswith("_hnd")

    def arranged(cache):
        """The cache [B or pages, rows, Hkv, D] as laid out: HND stores each head's rows
        together ([.., Hkv, rows, D]) and is passed as the permuted view."""
        if not hnd:
            return cache
        return cache.transpose(1, 2).contiguous().transpose(1, 2)

    layout_sets = []
    for q, k, v in sets:
        k_descale = v_descale = None
        if fp8(layout):  # paged as bytes (index copies of float8 tensors may lack kernels)
            k, k_descale, _ = quantized(k)
            v, v_descale, _ = quantized(v)
            k, v = k.view(torch.uint8), v.view(torch.uint8)
        table = None
        if page is not None:
            k, v, table = paged_cache(k, v, lengths, page, generator)
        if fp8(layout):
            k, v = k.view(torch.float8_e4m3fn), v.view(torch.float8_e4m3fn)
        layout_sets.append((q, arranged(k), arranged(v), seqlens, table, k_descale, v_descale))
    return layout_sets


def layout_reference(inputs, lengths, layout, causal, window, document=None):
    """reference_output of the first input set (q, k, v) as `layout` holds it: an e4m3 cache
    dequantized."""
    q, k, v = inputs
    if fp8(layout):
        k, v = quantized(k)[2], quantized(v)[2]
    return reference_output(q, k, v, lengths, causal, window, document)


def measure_attnjit(args, sets, reference, causal, window, bytes_moved, copy_gbps,
                    document=None, lengths=None, predicate=False):
    """attnjit's row cells on `sets` (attnjit_layout_sets): times, bandwidth, and the max
    difference from `reference`; 'error' / 'graph_error' when it raised. `document`: a
    causal document mask of that size over sequences of `lengths` keys (document_indices),
    as an element predicate over document ids when `predicate`."""
    import attnjit
    from timing import median_ms

    window_size = (-1, -1) if window is None else (window, 0)
    indices = mask = None
    if document is not None:
        q, k, _, _, table, _, _ = sets[0]
        capacity = k.shape[1] * (1 if table is None else table.shape[1])
        indices = document_indices(lengths, capacity, document)
        if predicate:
            # A document's id per position: its end, the vectors' LTS.
            ids = indices[:, 0, :, 0].contiguous()
            mask = attnjit.predicate("doc[q] == doc[k] && k <= q", tensors={"doc": ids})
            indices, causal = None, False

    def call(q, k, v, seqlens, table, k_descale, v_descale):
        return attnjit.attention_with_kvcache(q, k, v, seqlens, table, causal=causal,
                                              window_size=window_size,
                                              num_splits=args.num_splits,
                                              startend_row_indices=indices, mask=mask,
                                              k_descale=k_descale, v_descale=v_descale)

    row = {}
    try:
        row["diff"] = (call(*sets[0]).float() - reference).abs().max().item()
        row["ms"] = median_ms(call, sets, args.warmup, args.runs)
    except Exception as error:  # reported in the row; the other points still run
        row["error"] = failed(error)
        return row
    try:
        row["graph_ms"] = graph_replay_ms(call, sets, args.warmup, args.runs)
    except Exception as error:  # a capture the call does not survive: reported in the row
        row["graph_error"] = failed(error)
    # The bandwidth of the graph replays (what serving runs), of eager calls without them.
    row["gbps"] = bytes_moved / row.get("graph_ms", row["ms"]) / 1e6
    row["copy_fraction"] = row["gbps"] / copy_gbps
    return row


def measure_peers(args, sets, compiled_flex):
    """{peer: ms or failed(...)} eager and as CUDA-graph replays on `sets` (contiguous
    [B, Hkv, L, D] copies of the cache), and SDPA efficient's output on the first set
    ([B, Sq, H, D]) or None."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from timing import median_ms

    gqa = args.heads != args.kv_heads
    backends = {"SDPA cuDNN": SDPBackend.CUDNN_ATTENTION,
                "SDPA flash": SDPBackend.FLASH_ATTENTION,
                "SDPA efficient": SDPBackend.EFFICIENT_ATTENTION}

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=gqa)

    def flex(q, k, v):
        return compiled_flex(q, k, v, enable_gqa=gqa)

    times, graph_times, efficient_output = {}, {}, None
    for name in args.peers:
        def context():  # a fresh one for each entry: a context manager is entered once
            return sdpa_kernel(backends[name]) if name in backends else contextlib.nullcontext()

        function = sdpa if name in backends else flex
        try:
            with context():
                output = function(*sets[0])
                times[name] = median_ms(function, sets, args.warmup, args.runs)
        except Exception as error:  # a peer that cannot run this problem: reported
            times[name] = graph_times[name] = failed(error)
            continue
        try:
            with context():
                graph_times[name] = graph_replay_ms(function, sets, args.warmup, args.runs)
        except Exception as error:  # a capture the peer does not survive: reported
            graph_times[name] = failed(error)
        if name == "SDPA efficient":
            efficient_output = output.transpose(1, 2).float()
        del output
        torch.cuda.synchronize()
    return times, graph_times, efficient_output


def copy_gbps(warmup, runs):
    """Read + write GB/s of dst.copy_(src), 4 GiB of bf16."""
    import torch

    from timing import median_ms

    src = torch.randn(COPY_BYTES // 2, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(dst.copy_, [(src,)], warmup, runs)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * COPY_BYTES / ms / 1e6


def diff_cell(row, reference_name):
    if "diff" not in row:
        return "-"
    mark = "" if row["diff"] <= MAX_DIFF else "MISMATCH "
    return f"{mark}{row['diff']:.1e} ({reference_name})"


def attnjit_cells(row):
    """attnjit ms, graph ms, GB/s, % copy."""
    if "error" in row:
        return [row["error"], "-", "-", "-"]
    graph = row["graph_error"] if "graph_error" in row else f"{row['graph_ms']:.3f}"
    return [f"{row['ms']:.3f}", graph, f"{row['gbps']:,.0f}", f"{100 * row['copy_fraction']:.0f}%"]


def row_failures(label, row):
    """The report's failure lines for one attnjit row."""
    lines = [f"{label}: attnjit {row[key]}" for key in ("error", "graph_error") if key in row]
    if "diff" in row and not row["diff"] <= MAX_DIFF:
        lines.append(f"{label}: MISMATCH, max abs difference {row['diff']:.2e}")
    return lines


def prefill_report(args):
    """The --prefill table's lines: chunked prefill against attnjit's causal forward."""
    import torch

    import attnjit

    generator = torch.Generator().manual_seed(args.seed)
    heads, kv_heads, new = args.heads, args.kv_heads, args.prefill
    lines = [
        f"### Chunked prefill: {new} new tokens against the cache, attnjit only", "",
        "causal (bottom-right); graph ms of CUDA-graph replays; TFLOP/s = 4 x D x visible "
        "pairs / time. forward: attnjit.forward(q, k, v, causal=True) on the contiguous "
        "cache [B, L, Hkv, D] (its causal kernel, the same pairs); auto: "
        "attention_with_kvcache as the launch chooses; append: the same with k=, v= (the N "
        "new keys written into the cache first, cache_seqlens L - N); decode: num_splits=1 "
        "(the decode kernel). Ratios: forward ms over each one's.", "",
        "| B | L | D | layout | forward ms | auto ms | TFLOP/s | auto / forward | append ms | "
        "append / forward | decode ms | decode / forward | max diff |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    document_lines = [
        "", f"### Chunked prefill with causal documents of {args.document} keys (FlashMask "
        "vectors, rows as positions)", "",
        "auto and decode as above, with startend_row_indices (C = 1, documents counted from "
        "each sequence's end), or for mask predicate the same documents as "
        "attnjit.predicate(\"doc[q] == doc[k] && k <= q\") over each position's document id; "
        "causal auto: the table above's auto ms (no mask but causal); max diff against a "
        "float32 reference.", "",
        "| B | L | D | layout | mask | auto ms | decode ms | auto / decode | "
        "auto / causal auto | max diff |", "|---:|---:|---:|---|---|---:|---:|---:|---:|---:|"]
    failures = []
    for dim in args.head_dims:
        for batch in args.batches:
            for length in args.lengths:
                print(f"prefill B={batch} L={length} D={dim} ...", file=sys.stderr, flush=True)
                lengths = [length] * batch
                (q, k, v), = random_sets(1, batch, length, new, heads, kv_heads, dim)
                k_new, v_new = k[:, length - new:].clone(), v[:, length - new:].clone()
                pairs = batch * heads * sum(min(length, length - new + i + 1) for i in range(new))
                forward_ms = graph_replay_ms(lambda: attnjit.forward(q, k, v, causal=True),
                                             [()], args.warmup, args.runs)
                want = attnjit.forward(q, k, v, causal=True).float()
                for layout in args.layouts:
                    (_, k_cache, v_cache, seqlens, table), = attnjit_layout_sets(
                        [(q, k, v)], lengths, layout, generator)
                    before = seqlens - new

                    def auto():
                        return attnjit.attention_with_kvcache(q, k_cache, v_cache, seqlens,
                                                              table, causal=True)

                    def append():
                        return attnjit.attention_with_kvcache(q, k_cache, v_cache, before,
                                                              table, k=k_new, v=v_new,
                                                              causal=True)

                    def decode():
                        return attnjit.attention_with_kvcache(q, k_cache, v_cache, seqlens,
                                                              table, causal=True, num_splits=1)

                    cells, diff = [], 0.0
                    for call in (auto, append, decode):
                        try:
                            diff = max(diff, (call().float() - want).abs().max().item())
                            ms = graph_replay_ms(call, [()], args.warmup, args.runs)
                            cells.append((f"{ms:.3f}", f"{forward_ms / ms:.2f}x", ms))
                        except Exception as error:  # reported in the row
                            cells.append((failed(error), "-", None))
                    label = f"prefill B={batch} L={length} D={dim} {layout}"
                    if diff > MAX_DIFF:
                        failures.append(f"{label}: MISMATCH max diff {diff:.2e}")
                    for predicate in ((False, True) if args.predicate else (False,)):
                        if args.document is None:
                            break
                        document_lines.append(prefill_documents_row(
                            args, q, k, v, k_cache, v_cache, seqlens, table, lengths, layout,
                            cells[0][2], failures, predicate))
                    tflops = (f"{4 * dim * pairs / cells[0][2] / 1e9:.0f}"
                              if cells[0][2] else "-")
                    lines.append(
                        f"| {batch} | {length} | {dim} | {layout} | {forward_ms:.3f} | "
                        f"{cells[0][0]} | {tflops} | {cells[0][1]} | {cells[1][0]} | "
                        f"{cells[1][1]} | {cells[2][0]} | {cells[2][1]} | {diff:.1e} |")
                    del k_cache, v_cache, table
                del q, k, v, k_new, v_new
                torch.cuda.empty_cache()
    return lines + (document_lines if args.document is not None else []), failures


def prefill_documents_row(args, q, k, v, k_cache, v_cache, seqlens, table, lengths, layout,
                          causal_ms, failures, predicate):
    """One row of the chunked-prefill documents table (--prefill with --document): the launch's
    choice and the decode kernel with causal document vectors (or with `predicate` the
    element predicate over document ids), against the reference."""
    import attnjit

    capacity = k_cache.shape[1] if table is None else table.shape[1] * k_cache.shape[1]
    indices = document_indices(lengths, capacity, args.document)
    mask = None
    if predicate:
        # A document's id per position: its end, the vectors' LTS.
        ids = indices[:, 0, :, 0].contiguous()
        mask = attnjit.predicate("doc[q] == doc[k] && k <= q", tensors={"doc": ids})
        indices = None
    want = reference_output(q, k, v, lengths, True, None, document=args.document)
    cells, diff = [], 0.0
    for splits in (0, 1):
        def call():
            return attnjit.attention_with_kvcache(q, k_cache, v_cache, seqlens, table,
                                                  causal=not predicate, num_splits=splits,
                                                  startend_row_indices=indices, mask=mask)
        try:
            diff = max(diff, (call().float() - want).abs().max().item())
            cells.append(graph_replay_ms(call, [()], args.warmup, args.runs))
        except Exception as error:  # reported in the row
            cells.append(failed(error))
    batch, length, dim = q.shape[0], lengths[0], q.shape[-1]
    if diff > MAX_DIFF:
        failures.append(f"prefill B={batch} L={length} D={dim} {layout} documents "
                        f"({'predicate' if predicate else 'vectors'}): MISMATCH max diff "
                        f"{diff:.2e}")
    auto, decode = cells
    times = [c if isinstance(c, str) else f"{c:.3f}" for c in cells]
    ratio = (f"{decode / auto:.2f}x" if not isinstance(auto, str) and not isinstance(decode, str)
             else "-")
    versus = (f"{causal_ms / auto:.2f}x" if causal_ms and not isinstance(auto, str) else "-")
    return (f"| {batch} | {length} | {dim} | {layout} | "
            f"{'predicate' if predicate else 'vectors'} | {times[0]} | {times[1]} | {ratio} | "
            f"{versus} | {diff:.1e} |")


def main():
    args = parse_args()
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    import attnjit
    from timing import publish

    started = time.perf_counter()
    for limit in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                  "accumulated_recompile_limit"):
        try:  # one compiled FlexAttention per shape of the grid
            setattr(torch._dynamo.config, limit, max(256, getattr(torch._dynamo.config, limit)))
        except (AttributeError, TypeError, ValueError):  # not a knob of this torch version
            pass
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    # Static shapes: after a shape change torch.compile would otherwise trace a dynamic-shape
    # kernel, which is not Flex's decoding path at its best (5-6x slower measured at 64 x 8K).
    compiled_flex = torch.compile(flex_attention, dynamic=False)
    properties = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(properties, "L2_cache_size", 0) or FALLBACK_L2_BYTES
    heads, kv_heads = args.heads, args.kv_heads

    if args.prefill is not None:
        lines, failures = prefill_report(args)
        command = "python3 " + " ".join(shlex.quote(arg) for arg in sys.argv)
        header = [f"## Chunked prefill against a KV cache, {torch.cuda.get_device_name()}", "",
                  f"torch {torch.__version__}, attnjit {attnjit.version()}, "
                  f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; `{command}` "
                  f"({time.perf_counter() - started:.0f} s, compiles included)", "",
                  f"bf16, H={heads} Hkv={kv_heads}, Dv = D; seed {args.seed}; median of "
                  f"{args.runs} runs after {args.warmup}.", ""]
        if failures:
            lines += ["", "**FAILED:**"] + [f"- {failure}" for failure in failures]
        publish("\n".join(header + lines) + "\n", args.out, failures)
        return
    print("copy bandwidth ...", file=sys.stderr, flush=True)
    copy = copy_gbps(args.warmup, args.runs)
    rows, peer_rows, mask_rows, ragged_rows, failures = [], [], [], [], []
    # The masks whose time should follow their visible keys: (name, window, document).
    masks = []
    if args.window is not None:
        masks.append((f"window ({args.window}, 0)", args.window, None, False))
    if args.document is not None:
        masks.append((f"document {args.document}", None, args.document, False))
        if args.predicate:
            masks.append((f"predicate document {args.document}", None, args.document, True))

    def point(batch, length, new_tokens, dim):
        """The grid rows of one (B, L, Sq, D), each layout, and its mask rows."""
        lengths = [length] * batch
        cache_bytes = kv_bytes(lengths, kv_heads, dim)
        sets = random_sets(input_set_count(cache_bytes, l2_bytes), batch, length, new_tokens,
                           heads, kv_heads, dim)
        peer_sets = [tuple(t.transpose(1, 2).contiguous() for t in inputs) for inputs in sets]
        times, graph_times, efficient_output = measure_peers(args, peer_sets, compiled_flex)
        del peer_sets
        torch.cuda.empty_cache()
        peer_rows.append(dict(batch=batch, length=length, new_tokens=new_tokens, dim=dim,
                              times=times, graph_times=graph_times))
        causal = new_tokens > 1
        if efficient_output is not None and not causal:
            reference, reference_name = efficient_output, "eff"
        else:
            reference, reference_name = reference_output(*sets[0], lengths, causal, None), "fp32"
        del efficient_output
        bytes_moved = cache_bytes + io_bytes(batch, new_tokens, heads, dim)
        # Each mask shorter than the cache: its reference, the keys it leaves the new tokens
        # (a window W + Sq of them, a document its D) and their bytes.
        masked = []
        for name, window, document, predicate in masks:
            size = window if window is not None else document
            if length <= size:
                continue
            keys = min(length, window + new_tokens) if window is not None else document
            masked.append((name, window, document, predicate, keys,
                           reference_output(*sets[0], lengths, True, window, document),
                           kv_bytes([keys] * batch, kv_heads, dim)
                           + io_bytes(batch, new_tokens, heads, dim)))
        fp8_references = None  # e4m3 layouts: (the main reference, the masks'), made once
        for layout in args.layouts:
            print(f"B={batch} L={length} Sq={new_tokens} D={dim} {layout} ...",
                  file=sys.stderr, flush=True)
            layout_sets = attnjit_layout_sets(sets, lengths, layout, generator)
            labels = dict(batch=batch, length=length, new_tokens=new_tokens, dim=dim,
                          layout=layout, reference=reference_name)
            layout_reference_, layout_bytes, layout_masked = reference, bytes_moved, masked
            if fp8(layout):
                if fp8_references is None:
                    fp8_references = (
                        layout_reference(sets[0], lengths, layout, causal, None),
                        [layout_reference(sets[0], lengths, layout, True, window, document)
                         for _, window, document, *_ in masked])
                layout_reference_ = fp8_references[0]
                labels["reference"] = "fp32"
                layout_bytes = (kv_bytes(lengths, kv_heads, dim, 1)
                                + io_bytes(batch, new_tokens, heads, dim))
                layout_masked = [
                    (name, window, document, predicate, keys, mask_reference,
                     kv_bytes([keys] * batch, kv_heads, dim, 1)
                     + io_bytes(batch, new_tokens, heads, dim))
                    for (name, window, document, predicate, keys, _, _), mask_reference
                    in zip(masked, fp8_references[1])]
            row = measure_attnjit(args, layout_sets, layout_reference_, causal, None,
                                  layout_bytes, copy)
            rows.append(dict(labels, times=times, graph_times=graph_times, **row))
            failures.extend(row_failures(f"B={batch} L={length} Sq={new_tokens} D={dim} "
                                         f"{layout}", row))
            for (name, window, document, predicate, keys, mask_reference,
                 mask_bytes) in layout_masked:
                cells = measure_attnjit(args, layout_sets, mask_reference, True, window,
                                        mask_bytes, copy, document, lengths, predicate)
                mask_rows.append(dict(labels, mask=name, full=row, keys=keys, **cells))
                failures.extend(row_failures(f"B={batch} L={length} Sq={new_tokens} D={dim} "
                                             f"{layout} {name}", cells))
            del layout_sets

    def ragged(lengths, new_tokens, dim):
        """The ragged rows of one (Sq, D), each layout."""
        lengths = [max(n, new_tokens) for n in lengths]
        sets = random_sets(1, len(lengths), max(lengths), new_tokens, heads, kv_heads, dim)
        causal = new_tokens > 1
        reference = reference_output(*sets[0], lengths, causal, None)
        bytes_moved = (kv_bytes(lengths, kv_heads, dim)
                       + io_bytes(len(lengths), new_tokens, heads, dim))
        for layout in args.layouts:
            print(f"ragged Sq={new_tokens} D={dim} {layout} ...", file=sys.stderr, flush=True)
            layout_sets = attnjit_layout_sets(sets, lengths, layout, generator)
            row = measure_attnjit(
                args, layout_sets,
                layout_reference(sets[0], lengths, layout, causal, None) if fp8(layout)
                else reference, causal, None,
                (kv_bytes(lengths, kv_heads, dim, 1) + io_bytes(len(lengths), new_tokens, heads,
                                                                 dim)) if fp8(layout)
                else bytes_moved, copy)
            ragged_rows.append(dict(new_tokens=new_tokens, dim=dim, layout=layout,
                                    keys=sum(lengths), **row))
            failures.extend(row_failures(f"ragged Sq={new_tokens} D={dim} {layout}", row))
            del layout_sets

    for dim in args.head_dims:
        for batch in args.batches:
            for length in args.lengths:
                for new_tokens in args.new_tokens:
                    point(batch, length, new_tokens, dim)
                    torch.cuda.empty_cache()
    drawn = []
    if args.ragged:
        rng = random.Random(args.seed)
        drawn = [rng.randint(1, RAGGED_MAX_LENGTH) for _ in range(RAGGED_SEQUENCES)]
        for dim in args.head_dims:
            for new_tokens in args.new_tokens:
                ragged(drawn, new_tokens, dim)
                torch.cuda.empty_cache()

    command = "python3 " + " ".join(shlex.quote(arg) for arg in sys.argv)
    lines = [
        f"## Decode against a KV cache: attnjit vs SDPA and FlexAttention, "
        f"{torch.cuda.get_device_name()}", "",
        f"torch {torch.__version__}, attnjit {attnjit.version()}, "
        f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; `{command}` "
        f"({time.perf_counter() - started:.0f} s, compiles included)", "",
        f"bf16, H={heads} Hkv={kv_heads}, Dv = D; seed {args.seed} (inputs, page "
        f"permutations, ragged lengths); num_splits={args.num_splits}; median of {args.runs} "
        f"runs after {args.warmup}, over input sets spanning >= 2x L2 ({l2_bytes >> 20} MiB; "
        f"at most {MAX_INPUT_SETS} sets); graph: CUDA-graph replay of one captured call. "
        f"Copy: dst.copy_(src) of 4 GiB bf16 moves {copy:,.0f} GB/s (read + write); GB/s "
        "counts B·L·Hkv·(D + Dv)·2 + |q| + |o| per graph replay (per eager call where the "
        "capture failed; an _fp8 layout's cache one byte a value); % copy: attnjit GB/s over "
        "the copy's. _fp8: an e4m3 cache, one descale per sequence and KV head, checked "
        "against the float32 reference of the dequantized cache.", "",
        "Sq > 1: attnjit ran causal=True (the new tokens attend bottom-right); the peers ran "
        "with no mask (is_causal=False, no block mask), a slightly larger problem. Peers read "
        "contiguous [B, Hkv, L, D] copies of the cache; a paged row's peers are the contiguous "
        "ones. Speedup: best peer ms over attnjit ms, both eager (one call at a time from "
        "Python: at small sizes mostly host time) and both as CUDA-graph replays (what serving "
        "engines run). Max diff: against SDPA "
        f"efficient (eff) or a float32 reference (fp32); MISMATCH above {MAX_DIFF}.", "",
        "### Peers (ms, eager / graph)", "",
        "| B | L | Sq | D | " + " | ".join(args.peers) + " |",
        "|---:|---:|---:|---:|" + "---:|" * len(args.peers)]
    def ms_cell(value):
        return value if isinstance(value, str) else f"{value:.3f}"

    for peer in peer_rows:
        cells = [peer["times"][name] if isinstance(peer["times"][name], str) else
                 f"{ms_cell(peer['times'][name])} / {ms_cell(peer['graph_times'][name])}"
                 for name in args.peers]
        lines.append(f"| {peer['batch']} | {peer['length']} | {peer['new_tokens']} | "
                     f"{peer['dim']} | " + " | ".join(cells) + " |")
    if ragged_rows:
        lengths = sorted(drawn)
        lines += [
            "", f"### Ragged: {RAGGED_SEQUENCES} sequences, lengths {lengths[0]} to "
            f"{lengths[-1]} (median {lengths[len(lengths) // 2]}, uniform from 1 to "
            f"{RAGGED_MAX_LENGTH}, at least Sq), cache capacity the longest", "",
            "GB/s counts each sequence's own keys; peers: n/a.", "",
            "| Sq | D | layout | keys | attnjit ms | graph ms | GB/s | % copy | max diff |",
            "|---:|---:|---|---:|---:|---:|---:|---:|---|"]
        lines += [f"| {row['new_tokens']} | {row['dim']} | {row['layout']} | {row['keys']} | "
                  + " | ".join(attnjit_cells(row)) + f" | {diff_cell(row, 'fp32')} |"
                  for row in ragged_rows]
    if mask_rows:
        lines += [
            "", "### Masks over the cache: time against the visible keys", "",
            "causal; window (W, 0): window_size=(W, 0); document D: FlashMask vectors "
            "(startend_row_indices, C = 1) of documents of D keys from each sequence's end; "
            "predicate document D: the same documents as attnjit.predicate(\"doc[q] == doc[k] "
            "&& k <= q\") over a tensor of document ids. "
            "GB/s counts the keys the mask leaves the new tokens (W + Sq, or D, a sequence); "
            "full: the same point's full-cache attnjit time as a CUDA-graph replay, against the "
            "mask's (eager times where a graph failed).", "",
            "| B | L | Sq | D | layout | mask | full graph ms | mask ms | graph ms | full / mask | "
            "keys full / mask | GB/s | % copy | max diff |",
            "|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for row in mask_rows:
            cells = attnjit_cells(row)
            key = "graph_ms" if "graph_ms" in row["full"] and "graph_ms" in row else "ms"
            full = row["full"].get(key)
            ratio = f"{full / row[key]:.2f}x" if full and key in row else "-"
            lines.append(
                f"| {row['batch']} | {row['length']} | {row['new_tokens']} | {row['dim']} | "
                f"{row['layout']} | {row['mask']} | {'-' if full is None else f'{full:.3f}'} | "
                f"{cells[0]} | {cells[1]} | {ratio} | {row['length'] / row['keys']:.2f}x | "
                f"{cells[2]} | {cells[3]} | {diff_cell(row, 'fp32')} |")
    if failures:
        lines += ["", "**FAILED:**"] + [f"- {failure}" for failure in failures]
    lines += [
        "", "### attnjit against the best peer", "",
        "| B | L | Sq | D | layout | attnjit ms | graph ms | GB/s | % copy | best peer (ms) | "
        "speedup | best peer graph (ms) | graph speedup | max diff |",
        "|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---|---:|---|"]

    def best_of(times, ours):
        """The best peer's cell and our speedup over it ('-' without our time)."""
        ran = {name: ms for name, ms in times.items() if not isinstance(ms, str)}
        if not ran:
            return "none ran", "-"
        best = min(ran, key=ran.get)
        return f"{best} {ran[best]:.3f}", "-" if ours is None else f"{ran[best] / ours:.2f}x"

    for row in rows:
        eager = best_of(row["times"], row.get("ms"))
        graph = best_of(row["graph_times"], row.get("graph_ms"))
        lines.append(
            f"| {row['batch']} | {row['length']} | {row['new_tokens']} | {row['dim']} | "
            f"{row['layout']} | " + " | ".join(attnjit_cells(row)) +
            f" | {eager[0]} | {eager[1]} | {graph[0]} | {graph[1]} | "
            f"{diff_cell(row, row['reference'])} |")
    publish("\n".join(lines) + "\n", args.out, failures)


if __name__ == "__main__":
    main()
