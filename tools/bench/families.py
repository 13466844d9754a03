"""The twelve mask families of the benchmark protocol (docs/masks.md, docs/performance.md).

For each family: seeded synthetic parameters (documents per sample, windows, prefixes ...),
the family's rule as a FlexAttention mask_mod over small per-token tables derived from those
parameters (not from attnjit's vectors, so that comparing the two checks both), and the
arguments of attnjit.flashmask() that build attnjit's vectors from the same parameters.

Plain Python: the tables are nested lists wrapped in Table (for tests on the CPU) or torch
tensors (for FlexAttention and dense masks); the mask_mods use only comparisons, `&`, `|` and
`table[i, j]` lookups, which both kinds evaluate alike.
"""

import random

FAMILIES = ("full", "causal", "sliding_window", "causal_document", "document", "share_question",
            "global_sliding_window", "causal_blockwise", "prefix_lm_causal", "prefix_lm_document",
            "qk_sparse", "random_eviction")

TITLES = {
    "full": "full",
    "causal": "causal",
    "sliding_window": "sliding window",
    "causal_document": "causal document",
    "document": "document",
    "share_question": "share question",
    "global_sliding_window": "global + sliding window",
    "causal_blockwise": "causal blockwise",
    "prefix_lm_causal": "prefix-LM causal",
    "prefix_lm_document": "prefix-LM document",
    "qk_sparse": "QK-sparse",
    "random_eviction": "random eviction",
}

# Families whose rule reads the batch index (per-sample documents) or the head index.
PER_BATCH = {"causal_document", "document", "share_question", "causal_blockwise",
             "prefix_lm_document", "qk_sparse", "random_eviction"}
PER_HEAD = {"random_eviction"}

GLOBAL_TOKENS = 16
SHARE_QUESTION_ANSWERS = (2, 6)


def documents_per_sample(seqlen):
    """The protocol's document count range: [3, 7] per 8K sample, [10, 14] beyond."""
    return (3, 7) if seqlen <= 8192 else (10, 14)


def random_lengths(rng, total, count):
    """`count` lengths >= 1 summing to `total` (count <= total), cut at random points."""
    cuts = sorted(rng.sample(range(1, total), count - 1))
    return [end - start for start, end in zip([0] + cuts, cuts + [total])]


def random_documents(rng, seqlen):
    low, high = documents_per_sample(seqlen)
    return random_lengths(rng, seqlen, min(rng.randint(low, high), seqlen))


def eviction_rows(rng, seqlen):
    """Random eviction for one (sample, head): each key is evicted with probability 1/2, at a
    random row in [max(j + 1, N / 2), N), so every key stays visible to its own row."""
    rows = []
    half = seqlen // 2
    for j in range(seqlen):
        first = max(j + 1, half)
        rows.append(rng.randrange(first, seqlen) if first < seqlen and rng.random() < 0.5
                    else seqlen)
    return rows


def parameters(family, seqlen, batch, mask_heads, seed):
    """attnjit.flashmask() keyword arguments of `family` (per sample where the protocol draws
    them per sample), deterministic for `seed`."""
    rng = random.Random(f"{family}:{seqlen}:{batch}:{mask_heads}:{seed}")
    window = max(1, seqlen // 16)
    if family in ("full", "causal"):
        return {}
    if family == "sliding_window":
        return {"window": window}
    if family == "global_sliding_window":
        return {"global_tokens": min(GLOBAL_TOKENS, seqlen), "left": window, "right": window}
    if family == "prefix_lm_causal":
        return {"prefix": seqlen // 2}
    if family == "random_eviction":
        return {"evicted_at_row": [[eviction_rows(rng, seqlen) for _ in range(mask_heads)]
                                   for _ in range(batch)]}
    samples = [random_documents(rng, seqlen) for _ in range(batch)]
    if family in ("causal_document", "document"):
        return {"doc_lengths": samples}
    if family == "share_question":
        low, high = SHARE_QUESTION_ANSWERS
        return {"documents": [[random_lengths(rng, length, min(rng.randint(low, high) + 1, length))
                               for length in docs] for docs in samples]}
    if family == "causal_blockwise":
        return {"blocks": [docs[:-1] for docs in samples], "test": [docs[-1] for docs in samples]}
    if family == "prefix_lm_document":
        return {"doc_lengths": samples,
                "prefixes": [[rng.randint(1, length) for length in docs] for docs in samples]}
    if family == "qk_sparse":
        # The dropped segment is one document other than the first, so every row keeps a key.
        segments = []
        for docs in samples:
            index = rng.randrange(1, len(docs)) if len(docs) > 1 else 0
            segments.append((sum(docs[:index]), docs[index]))
        return {"offset": [offset for offset, _ in segments],
                "length": [length for _, length in segments]}
    raise ValueError(f"family: got {family!r}; accepted: {', '.join(FAMILIES)}")


def mask_heads_of(family, heads):
    """FlashMask heads of `family` for `heads` query (= KV) heads: per head for random eviction."""
    return heads if family in PER_HEAD else 1


class Table:
    """Nested lists indexed like a tensor: table[b, t] == rows[b][t]."""

    def __init__(self, rows):
        self.rows = rows

    def __getitem__(self, index):
        value = self.rows
        for i in index if isinstance(index, tuple) else (index,):
            value = value[i]
        return value


def _owner_table(lengths):
    """Segment index of each token for consecutive segments of `lengths`."""
    return [index for index, length in enumerate(lengths) for _ in range(length)]


def _starts(lengths):
    starts, start = [], 0
    for length in lengths:
        starts.append(start)
        start += length
    return starts


def tables(family, params, seqlen, batch):
    """Per-token tables (nested lists) that the family's mask_mod reads, from its parameters."""
    if family in ("causal_document", "document"):
        return {"doc": [_owner_table(docs) for docs in params["doc_lengths"]]}
    if family == "share_question":
        doc, segment, question = [], [], []
        for documents in params["documents"]:
            doc.append(_owner_table([sum(parts) for parts in documents]))
            segment.append(_owner_table([part for parts in documents for part in parts]))
            question.append([int(index == 0) for parts in documents
                             for index, part in enumerate(parts) for _ in range(part)])
        return {"doc": doc, "segment": segment, "question": question}
    if family == "causal_blockwise":
        blocks = [b + [t] for b, t in zip(params["blocks"], params["test"])]
        return {"block": [_owner_table(lengths) for lengths in blocks],
                "test": [[int(i == len(lengths) - 1) for i, length in enumerate(lengths)
                          for _ in range(length)] for lengths in blocks]}
    if family == "prefix_lm_document":
        prefix_end = []
        for docs, prefixes in zip(params["doc_lengths"], params["prefixes"]):
            prefix_end.append([start + prefix for start, prefix, length in
                               zip(_starts(docs), prefixes, docs) for _ in range(length)])
        return {"doc": [_owner_table(docs) for docs in params["doc_lengths"]],
                "prefix_end": prefix_end}
    if family == "qk_sparse":
        return {"drop_start": list(params["offset"]),
                "drop_end": [o + n for o, n in zip(params["offset"], params["length"])]}
    if family == "random_eviction":
        return {"evicted": params["evicted_at_row"]}
    return {}


def mask_mod(family, params, t):
    """The family's rule as mask_mod(b, h, q, k) -> visible, reading tables `t` (from tables(),
    as Table or tensors) and the scalar parameters; None for full (every key visible)."""
    if family == "full":
        return None
    if family == "causal":
        return lambda b, h, q, k: k <= q
    if family == "sliding_window":
        window = params["window"]
        return lambda b, h, q, k: (k <= q) & (q - k < window)
    if family == "causal_document":
        doc = t["doc"]
        return lambda b, h, q, k: (k <= q) & (doc[b, q] == doc[b, k])
    if family == "document":
        doc = t["doc"]
        return lambda b, h, q, k: doc[b, q] == doc[b, k]
    if family == "share_question":
        doc, segment, question = t["doc"], t["segment"], t["question"]
        return lambda b, h, q, k: ((k <= q) & (doc[b, q] == doc[b, k])
                                   & ((question[b, k] == 1) | (segment[b, q] == segment[b, k])))
    if family == "global_sliding_window":
        glob, left, right = params["global_tokens"], params["left"], params["right"]
        return lambda b, h, q, k: ((q < glob) | (k < glob)
                                   | ((q - left <= k) & (k <= q + right)))
    if family == "causal_blockwise":
        block, test = t["block"], t["test"]
        return lambda b, h, q, k: (k <= q) & ((block[b, q] == block[b, k]) | (test[b, q] == 1))
    if family == "prefix_lm_causal":
        prefix = params["prefix"]
        return lambda b, h, q, k: (k <= q) | (k < prefix)
    if family == "prefix_lm_document":
        doc, prefix_end = t["doc"], t["prefix_end"]
        return lambda b, h, q, k: (doc[b, q] == doc[b, k]) & ((k <= q) | (k < prefix_end[b, k]))
    if family == "qk_sparse":
        start, end = t["drop_start"], t["drop_end"]
        return lambda b, h, q, k: (k <= q) & ((k < start[b]) | (k >= end[b]) | (q >= end[b]))
    if family == "random_eviction":
        evicted = t["evicted"]
        return lambda b, h, q, k: (k <= q) & (q < evicted[b, h, k])
    raise ValueError(f"family: got {family!r}; accepted: {', '.join(FAMILIES)}")


def vector_visible(causal, columns, values, q, k):
    """Whether query q sees key k under FlashMask vectors `values` (the C values of column k;
    seqlen_q == seqlen_k): the column table of docs/masks.md, evaluated directly."""
    if causal and k > q:
        return False
    if causal:
        lts, lte = values[0], values[1] if columns == 2 else None
        return not (q >= lts and (lte is None or q < lte))
    if columns == 2:
        return not (q >= values[0] or q < values[1])
    lts, lte, uts, ute = values
    return not (lts <= q < lte or uts <= q < ute)


def attnjit_spec(mask_text, head_dim, direction):
    """The spec text attnjit.attention() compiles for a bf16 mask (mask_text: FlashMask's
    mask_text): its forward (with LSE) or its backward."""
    base = f"dtype=bf16 head_dim_qk={head_dim} head_dim_v={head_dim} mask={mask_text}"
    if direction == "forward":
        return f"{base} return_lse=true softcap=false alibi=false"
    return f"{base} return_lse=false softcap=false alibi=false direction=backward deterministic=false"
