"""attnjit.attention_with_kvcache on a CUDA device, against a float64 reference computed
sequence by sequence from the keys each sequence holds.

Skipped unless PyTorch and a CUDA device are available. Each case draws a batch of sequences
with ragged cached lengths (0, 1, the whole capacity and lengths that are not tile multiples),
1 to 5 new tokens per sequence, GQA ratios 1 to 16, and compares o and lse with the reference:
for sequence b with L_b keys and Sq new tokens (the last Sq of its keys), off = L_b - Sq,
token i sees key j when causal keeps j <= i + off and a window (left, right) keeps
i + off - left <= j <= i + off + right; soft-capping, ALiBi (slope[h] * (j - (i + off))),
sinks and the scale as in attnjit.attention. Rows that see no key give o = 0 and lse = -inf
(the sink's logit with sinks). The criterion is FlashAttention's: max|attnjit - ref| <=
2 * max|lowp - ref| + 1e-3 * max|ref|, lowp the same computation with the probabilities and the
output rounded to the inputs' dtype (a row that sees a few keys has an output of the values'
size, whose rounding alone exceeded the bound without it).

The cache's rows past each sequence's length hold NaN: they must never reach the output. Paged
caches (page sizes 1 to 256) take random page tables, some pages shared between sequences.
Every forced split count gives the unsplit result within the output's rounding. FlashMask
vectors over the cache ([B, Hm, capacity, C], rows as positions: token i is row off + i; key j
hidden from the rows in [LTS, LTE) and [UTS, UTE)) come as documents (whole key blocks hidden)
and random intervals of every column set, one mask head or one per KV head; element predicates
see the same positions. Appended keys
(k=, v=) land in the cache bit for bit at each sequence's length. A CUDA graph captured once
replays with new lengths and cache contents of the same shapes. Calls with many new tokens
(chunked prefill: on sm_90a the launch then runs the forward over the cache) equal the reference
and the decode kernel's result (num_splits=1 asks for it), contiguous and paged (pages of 8 to
256), appending or not, ragged (cu_seqlens_q) or not, under every mask by index, the score
modifiers and sinks.

Through the operators (PyTorch 2.4+: torch.ops.attnjit.attention_with_kvcache and
attention_with_kvcache_append): torch.compile(fullgraph=True) gives eager's bits, contiguous and
paged, with and without the LSE, with FlashMask vectors and with a predicate; a compiled append
leaves the caller's caches as eager's does; a compiled step captured in a CUDA graph replays
with new lengths and block tables; fake tensors raise the eager call's error;
torch.library.opcheck passes on both operators.

The data are fresh on every run; the seed is printed, and ATTNJIT_TEST_SEED=<number> repeats a
run.

Run: ATTNJIT_LIBRARY=build/libattnjit.so python3 -m unittest discover -s tools/python/tests \
         -p test_kvcache_gpu.py -v
"""

import contextlib
import math
import random
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402
from cache_dir import TemporaryCacheTest  # noqa: E402
from torch_cuda import HAS_CUDA, run_seed, torch  # noqa: E402

SEED = run_seed()
HAS_OPS = HAS_CUDA and attnjit._ops is not None


def draw_lengths(rng, batch, capacity, new_tokens):
    """Cached lengths (new tokens included): an empty sequence where the batch allows, one of
    length 1, a full one, the rest ragged (not tile multiples)."""
    fixed = [0, 1, capacity]
    lengths = [fixed[i] if i < len(fixed) else rng.randint(new_tokens, capacity)
               for i in range(batch)]
    lengths = [length + 1 if 0 < length < capacity and length % 16 == 0 else length
               for length in lengths]
    rng.shuffle(lengths)
    return lengths


def vector_rows(vectors, causal, b, head, heads):
    """The rows [start, end) each key hides, twice (lower and upper interval), from FlashMask
    vectors [B, Hm, capacity, C] for query head `head` of sequence b: C 1 (LTS; LTE unbounded)
    or 2 (LTS, LTE) when causal, 2 (LTS, UTE; UTS 0) or 4 (LTS, LTE, UTS, UTE) when not."""
    mask_heads, capacity, columns = vectors.shape[1:]
    column = vectors[b, head // (heads // mask_heads)].long()
    unbounded = torch.full((capacity,), 1 << 40, dtype=torch.long, device=vectors.device)
    zero = torch.zeros_like(unbounded)
    lts = column[:, 0]
    lte = column[:, 1] if columns == 4 or (causal and columns == 2) else unbounded
    if causal:
        return (lts, lte), (zero, zero)
    uts = column[:, 2] if columns == 4 else zero
    ute = column[:, 3] if columns == 4 else column[:, 1]
    return (lts, lte), (uts, ute)


def reference(q, k, v, lengths, *, causal, window, softcap, sinks, scale, lowp, vectors=None,
              slopes=None, visible_fn=None):
    """o [B, Sq, H, Dv] and lse [B, H, Sq] in float64 (lowp: the probabilities rounded to q's
    dtype before P V, and o after it, as the kernels do), from contiguous caches k/v
    [B, capacity, Hkv, D].
    `vectors`: FlashMask's [B, Hm, capacity, C], whose rows are positions: token i of a
    sequence of L keys is row L - Sq + i. `slopes`: ALiBi's [H], slope[h] * (j - (i + off))
    added after soft-capping. `visible_fn(b, h, position [Sq, 1], key [1, L])`: a predicate's
    visibility, positions as the vectors'."""
    batch, seqlen_q, heads, _ = q.shape
    group = heads // k.shape[2]
    o = torch.zeros(batch, seqlen_q, heads, v.shape[-1], dtype=torch.float64, device=q.device)
    lse = torch.full((batch, heads, seqlen_q), -math.inf, dtype=torch.float64, device=q.device)
    for b, length in enumerate(lengths):
        keys = k[b, :length].double().repeat_interleave(group, dim=1)    # [L, H, D]
        values = v[b, :length].double().repeat_interleave(group, dim=1)  # [L, H, Dv]
        scores = torch.einsum("shd,lhd->hsl", q[b].double(), keys) * scale
        if softcap is not None:
            scores = softcap * torch.tanh(scores / softcap)
        i = torch.arange(seqlen_q, device=q.device).view(seqlen_q, 1)
        j = torch.arange(length, device=q.device).view(1, length)
        off = length - seqlen_q
        if slopes is not None:
            scores = scores + slopes.double().view(heads, 1, 1) * (j - (i + off)).double()
        visible = torch.ones(seqlen_q, length, dtype=torch.bool, device=q.device)
        left, right = window
        if causal:
            right = 0
        if left >= 0:
            visible &= j >= i + off - left
        if right >= 0:
            visible &= j <= i + off + right
        visible = visible.expand(heads, seqlen_q, length).clone()
        if vectors is not None:
            position = i + off  # [Sq, 1]
            for h in range(heads):
                for start, end in vector_rows(vectors, causal, b, h, heads):
                    start, end = start[:length].view(1, length), end[:length].view(1, length)
                    visible[h] &= ~((position >= start) & (position < end))
        if visible_fn is not None:
            for h in range(heads):
                visible[h] &= visible_fn(b, h, i + off, j)
        scores = scores.masked_fill(~visible, -math.inf)
        if sinks is not None:
            sink = sinks.double().view(heads, 1, 1).expand(heads, seqlen_q, 1)
            total = torch.logsumexp(torch.cat([scores, sink], dim=-1), dim=-1)
        else:
            total = torch.logsumexp(scores, dim=-1) if length > 0 else \
                torch.full((heads, seqlen_q), -math.inf, dtype=torch.float64, device=q.device)
        safe = torch.where(torch.isinf(total), torch.zeros_like(total), total)
        probabilities = torch.exp(scores - safe.unsqueeze(-1))
        if lowp:
            probabilities = probabilities.to(q.dtype).double()
        o[b] = torch.einsum("hsl,lhd->shd", probabilities, values)
        if lowp:  # and the output rounded to q's dtype, as the kernels write it
            o[b] = o[b].to(q.dtype).double()
        lse[b] = total
    return o, lse


def references(q, k, v, lengths, *, causal, window=(-1, -1), softcap=None, sinks=None, scale,
               vectors=None, slopes=None, visible_fn=None):
    """(reference, lowp) of reference(): float64, and with the probabilities rounded."""
    arguments = dict(causal=causal, window=window, softcap=softcap, sinks=sinks, scale=scale,
                     vectors=vectors, slopes=slopes, visible_fn=visible_fn)
    return (reference(q, k, v, lengths, lowp=False, **arguments),
            reference(q, k, v, lengths, lowp=True, **arguments))


@unittest.skipUnless(HAS_CUDA, "needs PyTorch with a CUDA device")
class KvCacheCase(TemporaryCacheTest):
    """What the test classes share: the run's random data, caches and the comparison."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        print(f"\ntest_kvcache_gpu: seed {SEED} (ATTNJIT_TEST_SEED={SEED} repeats it)")

    def setUp(self):
        self.rng = random.Random(SEED + sum(map(ord, self.id())))
        self.generator = torch.Generator(device="cuda").manual_seed(self.rng.randrange(2**62))

    def randn(self, *shape, dtype=None):
        dtype = torch.bfloat16 if dtype is None else dtype
        return torch.randn(*shape, generator=self.generator, device="cuda",
                           dtype=torch.float32).to(dtype)

    def caches(self, batch, capacity, kv_heads, head_dim, head_dim_v, lengths, dtype):
        """Contiguous caches whose rows past each length hold NaN."""
        k = self.randn(batch, capacity, kv_heads, head_dim, dtype=dtype)
        v = self.randn(batch, capacity, kv_heads, head_dim_v, dtype=dtype)
        for b, length in enumerate(lengths):
            k[b, length:] = math.nan
            v[b, length:] = math.nan
        return k, v

    def paged(self, k, v, page_size, shared, lengths):
        """Page pools holding the contiguous caches' pages in a random order, and their block
        table; with `shared` (where both hold a whole first page), sequence 1's first page is
        sequence 0's, its contents made the same."""
        batch, capacity = k.shape[:2]
        pages = (capacity + page_size - 1) // page_size
        order = list(range(batch * pages))
        self.rng.shuffle(order)
        pool_k = torch.full((batch * pages, page_size) + k.shape[2:], math.nan,
                            dtype=k.dtype, device=k.device)
        pool_v = torch.full((batch * pages, page_size) + v.shape[2:], math.nan,
                            dtype=v.dtype, device=v.device)
        table = torch.empty(batch, pages, dtype=torch.int32)
        for b in range(batch):
            for p in range(pages):
                physical = order[b * pages + p]
                table[b, p] = physical
                rows = slice(p * page_size, min(capacity, (p + 1) * page_size))
                count = rows.stop - rows.start
                pool_k[physical, :count] = k[b, rows]
                pool_v[physical, :count] = v[b, rows]
        if shared and batch > 1 and min(lengths[0], lengths[1]) >= page_size:
            k[1, :page_size] = k[0, :page_size]
            v[1, :page_size] = v[0, :page_size]
            table[1, 0] = table[0, 0]
        return pool_k, pool_v, table.cuda()

    @staticmethod
    def logical(cache, table, capacity):
        """The contiguous cache [B, capacity, Hkv, D] that a page pool holds through its block
        table (a contiguous cache itself when the table is None)."""
        if table is None:
            return cache
        pages = table.long()
        return torch.stack([cache[pages[b]].reshape(-1, *cache.shape[2:])[:capacity]
                            for b in range(table.shape[0])])

    def check(self, label, got, want, lowp):
        got = got.double()
        finite = torch.isfinite(want)
        self.assertTrue(torch.equal(torch.isfinite(got), finite), f"{label}: infinities differ")
        error = (got[finite] - want[finite]).abs().max().item() if finite.any() else 0.0
        lowp_error = (lowp[finite] - want[finite]).abs().max().item() if finite.any() else 0.0
        scale = want[finite].abs().max().item() if finite.any() else 0.0
        bound = 2 * lowp_error + 1e-3 * scale + 1e-6
        where = ""
        if error > bound:
            difference = torch.where(finite, (got - want).abs(), torch.zeros_like(got))
            where = f" at {list(torch.nonzero(difference == difference.max())[0].tolist())}"
        self.assertLessEqual(error, bound, f"{label}: max error {error:.3e} > {bound:.3e}{where} "
                                           f"(lowp error {lowp_error:.3e}, seed {SEED})")


    @staticmethod
    def launched_kernels(call):
        """The names of the CUDA kernels `call` launches (the profiler's trace)."""
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as trace:
            call()
            torch.cuda.synchronize()
        return {event.key for event in trace.key_averages()}

    def documents(self, mask_heads):
        """Causal document vectors (C = 1): documents of 1 to 300 keys; key j hides the rows
        from its document's end on (LTS), so a token sees its own document's keys only. With
        several mask heads each draws its own documents."""
        def build(lengths, capacity):
            indices = torch.empty(len(lengths), mask_heads, capacity, 1, dtype=torch.int32)
            for b in range(len(lengths)):
                for h in range(mask_heads):
                    start = 0
                    while start < capacity:
                        end = min(capacity, start + self.rng.randint(1, 300))
                        indices[b, h, start:end, 0] = end
                        start = end
            return indices.cuda()
        return build

    def intervals(self, columns, causal, mask_heads):
        """Random vectors of `columns` (valid intervals, start <= end <= capacity), a third of
        the keys hiding nothing, a few long runs of keys hiding every row (whole blocks
        skipped)."""
        def build(lengths, capacity):
            batch = len(lengths)
            shape = (batch, mask_heads, capacity)
            a = torch.randint(0, capacity + 1, shape)
            c = torch.randint(0, capacity + 1, shape)
            lo, hi = torch.minimum(a, c), torch.maximum(a, c)
            a2 = torch.randint(0, capacity + 1, shape)
            c2 = torch.randint(0, capacity + 1, shape)
            lo2, hi2 = torch.minimum(a2, c2), torch.maximum(a2, c2)
            keep = torch.rand(shape) < 1 / 3
            lo = torch.where(keep, torch.full_like(lo, capacity), lo)
            hi = torch.where(keep, torch.full_like(hi, capacity), hi)
            lo2 = torch.where(keep, torch.zeros_like(lo2), lo2)
            hi2 = torch.where(keep, torch.zeros_like(hi2), hi2)
            for _ in range(3):  # a run of keys hidden from every row
                start = self.rng.randrange(capacity)
                end = min(capacity, start + self.rng.randint(64, 300))
                lo[..., start:end], hi[..., start:end] = 0, capacity
                lo2[..., start:end], hi2[..., start:end] = 0, 0
            if causal:
                stack = [lo] if columns == 1 else [lo, hi]
            else:
                stack = [lo, hi2] if columns == 2 else [lo, hi, lo2, hi2]
            return torch.stack(stack, dim=-1).int().cuda()
        return build


class KvCacheTest(KvCacheCase):
    def run_case(self, *, batch, capacity, heads, kv_heads, head_dim, head_dim_v=None,
                 new_tokens, causal=False, window=(-1, -1), softcap=None, with_sinks=False,
                 page_size=None, shared=False, splits=(0, 1, 3), dtype=None, vectors=None,
                 alibi=False, predicate=None, kernels=None):
        """`vectors(lengths, capacity)`: FlashMask vectors [B, Hm, capacity, C] for the call;
        `predicate(capacity)`: (an attnjit.predicate mask, its visible_fn for reference());
        `kernels`: {split count: the prefix of a kernel's name that call must launch}."""
        dtype = torch.bfloat16 if dtype is None else dtype
        head_dim_v = head_dim_v or head_dim
        lengths = draw_lengths(self.rng, batch, capacity, new_tokens)
        label = (f"B={batch} cap={capacity} H={heads}/{kv_heads} d={head_dim}/{head_dim_v} "
                 f"Sq={new_tokens} causal={causal} window={window} softcap={softcap} "
                 f"sinks={with_sinks} alibi={alibi} page={page_size} lengths={lengths}")
        q = self.randn(batch, new_tokens, heads, head_dim, dtype=dtype)
        k, v = self.caches(batch, capacity, kv_heads, head_dim, head_dim_v, lengths, dtype)
        sinks = self.randn(heads, dtype=torch.float32) if with_sinks else None
        # ALiBi's slopes as BLOOM's: 2^(-8 h / H), one per query head.
        slopes = (torch.pow(2.0, -8.0 * torch.arange(1, heads + 1, device="cuda") / heads)
                  if alibi else None)
        cache_k, cache_v, table = k, v, None
        if page_size is not None:
            cache_k, cache_v, table = self.paged(k, v, page_size, shared, lengths)
        seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        scale = 1.0 / math.sqrt(head_dim)
        indices = None
        if vectors is not None:  # a row per key of the capacity: whole pages when paged
            indices = vectors(lengths, capacity if table is None else table.shape[1] * page_size)
            label += f" vectors={tuple(indices.shape)}"
        mask, visible_fn = None, None
        if predicate is not None:
            mask, visible_fn = predicate(capacity if table is None else table.shape[1] * page_size)
            label += f" mask={mask.expression!r}"
        (want_o, want_lse), (lowp_o, _) = references(q, k, v, lengths, causal=causal,
                                                     window=window, softcap=softcap, sinks=sinks,
                                                     scale=scale, vectors=indices,
                                                     slopes=slopes, visible_fn=visible_fn)
        outputs = {}
        for count in splits:
            o, lse = attnjit.attention_with_kvcache(
                q, cache_k, cache_v, seqlens, table, causal=causal, window_size=window,
                softcap=softcap, sinks=sinks, num_splits=count, return_lse=True,
                startend_row_indices=indices, alibi_slopes=slopes, mask=mask)
            torch.cuda.synchronize()
            self.check(f"{label} splits={count}: o", o, want_o, lowp_o)
            self.check(f"{label} splits={count}: lse", lse, want_lse, want_lse)
            outputs[count] = o.double()
            if kernels and count in kernels:
                launched = self.launched_kernels(lambda: attnjit.attention_with_kvcache(
                    q, cache_k, cache_v, seqlens, table, causal=causal, window_size=window,
                    softcap=softcap, sinks=sinks, num_splits=count, return_lse=True,
                    startend_row_indices=indices, alibi_slopes=slopes, mask=mask))
                self.assertTrue(any(name.startswith(kernels[count]) for name in launched),
                                f"{label} splits={count}: launched {sorted(launched)}, "
                                f"expected {kernels[count]}*")
        base = outputs[splits[0]]
        for count, o in outputs.items():
            # The splits' merge is exact up to fp32 rounding: at most one rounding step of the
            # output's dtype apart.
            ulp = torch.finfo(dtype).eps * max(1.0, base.abs().max().item())
            self.assertLessEqual((o - base).abs().max().item(), ulp,
                                 f"{label}: splits {count} against {splits[0]}")

    def test_contiguous_masks_and_gqa(self):
        for head_dim, head_dim_v in ((128, 128), (64, 64), (192, 128)):
            for heads, kv_heads in ((32, 8), (16, 16), (16, 1)):
                for causal, window in ((False, (-1, -1)), (True, (-1, -1)), (False, (40, 3))):
                    for new_tokens in (1, 4):
                        with self.subTest(d=head_dim, h=heads, causal=causal, window=window,
                                          sq=new_tokens):
                            self.run_case(batch=5, capacity=333, heads=heads, kv_heads=kv_heads,
                                          head_dim=head_dim, head_dim_v=head_dim_v,
                                          new_tokens=new_tokens, causal=causal, window=window)

    def test_flashmask_vectors(self):
        """FlashMask vectors over the cache, rows as positions: documents (whole blocks
        skipped), random intervals of every column set, one mask head or one per KV head,
        contiguous and paged, 1 and 4 new tokens, split and not."""
        torch.manual_seed(self.rng.randrange(2**62))
        cases = [("documents", True, 1, 1, None), ("documents", True, 1, 8, 16),
                 ("intervals", True, 1, 1, None), ("intervals", True, 2, 8, 64),
                 ("intervals", False, 2, 1, 16), ("intervals", False, 4, 8, None),
                 ("intervals", False, 4, 1, 1)]
        for family, causal, columns, mask_heads, page_size in cases:
            for new_tokens in (1, 4):
                with self.subTest(family=family, causal=causal, columns=columns,
                                  mask_heads=mask_heads, page=page_size, sq=new_tokens):
                    vectors = (self.documents(mask_heads) if family == "documents"
                               else self.intervals(columns, causal, mask_heads))
                    self.run_case(batch=4, capacity=1500, heads=32, kv_heads=8,
                                  head_dim=128 if new_tokens == 1 else 64,
                                  new_tokens=new_tokens, causal=causal, page_size=page_size,
                                  splits=(1, 0, 5), vectors=vectors)

    @staticmethod
    def predicate_documents(batch):
        """A predicate over positions: documents by a tensor of document ids per position (one
        row per sequence, about 100 keys a document), causal inside each."""
        def build(capacity):
            ids = torch.cumsum((torch.rand(batch, capacity, device="cuda") < 0.01).int(), dim=1)
            ids = ids.int().contiguous()
            mask = attnjit.predicate("doc[q] == doc[k] && k <= q", tensors={"doc": ids})

            def visible(b, h, position, key):
                return (ids[b].long()[position] == ids[b].long()[key]) & (key <= position)
            return mask, visible
        return build

    @staticmethod
    def predicate_band(capacity):
        """A banded, head-dependent predicate with literals."""
        mask = attnjit.predicate("k <= q && q - k < 137 && (k % 5 != 2 || h % 2 == 0)")

        def visible(b, h, position, key):
            return (key <= position) & (position - key < 137) & ((key % 5 != 2) | (h % 2 == 0))
        return mask, visible

    def test_predicates(self):
        """Element predicates over the cache, q and k positions: documents by a tensor of
        document ids per position (a block table classifies the decode kernel's blocks), and a
        banded, head-dependent rule with literals (the CTAs classify them); contiguous and
        paged, split and not, GQA 4 and 3."""
        torch.manual_seed(self.rng.randrange(2**62))
        for name, predicate in (("documents", self.predicate_documents(4)),
                                ("band", self.predicate_band)):
            for page_size, new_tokens in ((None, 1), (16, 3)):
                with self.subTest(predicate=name, page=page_size, sq=new_tokens):
                    self.run_case(batch=4, capacity=1200, heads=32, kv_heads=8, head_dim=128,
                                  new_tokens=new_tokens, page_size=page_size, splits=(1, 0, 4),
                                  predicate=predicate)
        # The documents' block table (the predicate reads no h) has tiles of 16 new tokens:
        # with 3 query heads per KV head a CTA's 16 packed rows span two of them.
        with self.subTest(predicate="documents", gqa=3, sq=40):
            self.run_case(batch=4, capacity=1200, heads=12, kv_heads=4, head_dim=64,
                          new_tokens=40, page_size=8, splits=(1, 3),
                          predicate=self.predicate_documents(4))

    def test_chunked_prefill_predicates(self):
        """Predicates in chunked prefill: the prefill kernel (checked by name) classifies its
        tiles from a block table per sequence whose q are positions, and must equal the
        reference and the decode kernel; contiguous and paged (8 to 64), d64 to d256 and
        (192, 128), with softcap and ALiBi; ragged new tokens with appends too."""
        torch.manual_seed(self.rng.randrange(2**62))
        documents = self.predicate_documents(3)
        cases = (
            (documents, dict(head_dim=128, new_tokens=300)),
            (documents, dict(head_dim=64, new_tokens=200, page_size=16, shared=True)),
            (self.predicate_band, dict(head_dim=128, new_tokens=260, page_size=64)),
            (self.predicate_band, dict(head_dim=64, new_tokens=150, page_size=8, softcap=30.0)),
            (documents, dict(head_dim=192, head_dim_v=128, new_tokens=140, page_size=32,
                             alibi=True)),
            (self.predicate_band, dict(head_dim=256, new_tokens=129, dtype=torch.float16)),
        )
        for predicate, case in cases:
            with self.subTest(**{k: v for k, v in case.items() if k != "dtype"}):
                self.run_case(batch=3, capacity=1100, heads=32, kv_heads=8, predicate=predicate,
                              splits=(0, 1), kernels={0: "attnjit_prefill_",
                                                      1: "attnjit_decode_"}, **case)
        for page_size in (None, 16):
            self.ragged_case([1, 300, 0, 131, 77, 256], page_size, page_size is None,
                             vectors=False, predicate=self.predicate_documents(6),
                             splits=(0, 1),
                             kernels={0: "attnjit_prefill_", 1: "attnjit_decode_"})

    def test_long_cache_many_splits(self):
        # 200 splits of 5000 keys: more splits than a warp's lanes in the merge, and empty ones.
        self.run_case(batch=3, capacity=5000, heads=32, kv_heads=8, head_dim=128, new_tokens=1,
                      splits=(1, 0, 2, 7, 64, 200))
        self.run_case(batch=2, capacity=4099, heads=8, kv_heads=2, head_dim=64, new_tokens=5,
                      causal=True, splits=(1, 0, 13), dtype=torch.float16)

    def test_modifiers(self):
        for softcap, sinks, alibi in ((30.0, False, False), (None, True, False),
                                      (20.0, True, False), (None, False, True),
                                      (30.0, True, True)):
            with self.subTest(softcap=softcap, sinks=sinks, alibi=alibi):
                self.run_case(batch=4, capacity=700, heads=32, kv_heads=8, head_dim=128,
                              new_tokens=2, causal=True, softcap=softcap, with_sinks=sinks,
                              alibi=alibi, splits=(1, 5))
        # ALiBi with a window, paged, over documents, GQA 16.
        self.run_case(batch=3, capacity=900, heads=16, kv_heads=1, head_dim=64, new_tokens=3,
                      window=(100, 0), page_size=16, alibi=True, splits=(1, 0))
        self.run_case(batch=3, capacity=900, heads=16, kv_heads=4, head_dim=128, new_tokens=1,
                      causal=True, alibi=True, vectors=self.documents(1), splits=(1, 0))

    def test_chunked_prefill(self):
        """Hundreds of new tokens per sequence: the launch runs the prefill kernel where the
        spec has one (sm_90a, masks by index) and the shapes favour it (every case here:
        runtime/launch/plan_launch.cpp's runs_prefill), which must equal the reference and the
        decode kernel (num_splits=1). Capacities and lengths are not tile multiples, rows past
        each length hold NaN, pages are shuffled and shared."""
        cases = (
            dict(batch=3, capacity=1000, heads=32, kv_heads=8, head_dim=128, new_tokens=300,
                 causal=True),
            dict(batch=3, capacity=1000, heads=32, kv_heads=8, head_dim=128, new_tokens=300,
                 causal=True, page_size=16, shared=True),
            dict(batch=4, capacity=700, heads=8, kv_heads=8, head_dim=64, new_tokens=130,
                 window=(200, 0), page_size=8, alibi=True),
            dict(batch=3, capacity=900, heads=16, kv_heads=2, head_dim=128, new_tokens=257,
                 page_size=64, shared=True, with_sinks=True, softcap=30.0),
            dict(batch=2, capacity=1300, heads=16, kv_heads=4, head_dim=192, head_dim_v=128,
                 new_tokens=200, causal=True, page_size=256, with_sinks=True),
            dict(batch=2, capacity=600, heads=16, kv_heads=1, head_dim=256, new_tokens=180,
                 causal=True, page_size=32, dtype=torch.float16),
            dict(batch=4, capacity=800, heads=16, kv_heads=16, head_dim=64, new_tokens=64,
                 window=(50, 30), page_size=128, softcap=20.0, alibi=True),
            # Three consumer warpgroups (192-row query blocks): d64, causal, contiguous and over
            # pages smaller (two producer warps) and larger than half the key block.
            dict(batch=3, capacity=900, heads=16, kv_heads=4, head_dim=64, new_tokens=333,
                 causal=True, with_sinks=True),
            dict(batch=3, capacity=900, heads=16, kv_heads=4, head_dim=64, new_tokens=333,
                 causal=True, page_size=16, shared=True),
            dict(batch=2, capacity=1000, heads=8, kv_heads=8, head_dim=64, new_tokens=401,
                 causal=True, page_size=128),
            dict(batch=2, capacity=700, heads=8, kv_heads=2, head_dim=64, new_tokens=250,
                 causal=True, page_size=8, shared=True),
        )
        for case in cases:
            with self.subTest(**{k: v for k, v in case.items() if k != "dtype"}):
                self.run_case(splits=(0, 1), kernels={0: "attnjit_prefill_",
                                                      1: "attnjit_decode_"}, **case)

    def test_chunked_prefill_vectors(self):
        """FlashMask vectors in chunked prefill (rows as positions): the prefill kernel (checked
        by name) must equal the reference and the decode kernel, for documents (whole blocks
        skipped) and random intervals of every column set, one mask head or one per KV head,
        contiguous and paged (pages shuffled and shared, NaN past each length), d64 to d256
        and (192, 128); ragged new tokens too."""
        torch.manual_seed(self.rng.randrange(2**62))
        cases = (
            (self.documents(1), dict(head_dim=128, new_tokens=300, causal=True)),
            (self.documents(8), dict(head_dim=128, new_tokens=260, causal=True, page_size=16,
                                     shared=True)),
            (self.intervals(1, True, 1), dict(head_dim=64, new_tokens=200, causal=True,
                                              page_size=64)),
            (self.intervals(2, True, 8), dict(head_dim=128, new_tokens=150, causal=True,
                                              page_size=8, alibi=True)),
            (self.intervals(2, False, 1), dict(head_dim=64, new_tokens=333, with_sinks=True)),
            (self.intervals(4, False, 8), dict(head_dim=128, new_tokens=129, page_size=32,
                                               softcap=30.0)),
            (self.intervals(4, False, 1), dict(head_dim=64, new_tokens=140, page_size=16)),
            (self.documents(1), dict(head_dim=192, head_dim_v=128, new_tokens=200, causal=True,
                                     page_size=256)),
            (self.documents(8), dict(head_dim=256, new_tokens=180, causal=True, page_size=32,
                                     dtype=torch.float16)),
        )
        for vectors, case in cases:
            with self.subTest(**{k: v for k, v in case.items() if k != "dtype"}):
                self.run_case(batch=3, capacity=1100, heads=32, kv_heads=8, vectors=vectors,
                              splits=(0, 1), kernels={0: "attnjit_prefill_",
                                                      1: "attnjit_decode_"}, **case)
        for page_size in (None, 16):
            self.ragged_case([1, 300, 0, 131, 77, 256], page_size, page_size is None,
                             vectors=True, splits=(0, 1),
                             kernels={0: "attnjit_prefill_", 1: "attnjit_decode_"})

    def test_paged(self):
        for page_size in (1, 8, 16, 64, 256):
            with self.subTest(page_size=page_size):
                self.run_case(batch=4, capacity=600, heads=32, kv_heads=8, head_dim=128,
                              new_tokens=3, causal=True, page_size=page_size,
                              shared=page_size >= 16, splits=(1, 0, 4))

    def test_append(self):
        """k= and v= are written at each sequence's cached length (through the page table
        when paged), bit for bit, and the attention covers them; rows past the capacity are
        not written."""
        # A paged cache holds whole pages (max_pages x page_size keys): 304 for every size.
        batch, capacity, heads, kv_heads, d = 4, 304, 16, 4, 64
        # 3 new tokens: the decode kernel; 100 (400 rows per KV head): the prefill kernel.
        for new, page_size in ((3, None), (3, 1), (3, 16), (100, None), (100, 8), (100, 16)):
            with self.subTest(new=new, page_size=page_size):
                cached = [0, 5, capacity - 2, 177]  # the third's last new row falls past it
                total = [min(c + new, capacity) for c in cached]
                q = self.randn(batch, new, heads, d)
                k, v = self.caches(batch, capacity, kv_heads, d, d, cached, torch.bfloat16)
                k_new = self.randn(batch, new, kv_heads, d)
                v_new = self.randn(batch, new, kv_heads, d)
                expected_k, expected_v = k.clone(), v.clone()
                for b, c in enumerate(cached):
                    rows = min(new, capacity - c)
                    expected_k[b, c:c + rows] = k_new[b, :rows]
                    expected_v[b, c:c + rows] = v_new[b, :rows]
                cache_k, cache_v, table = k, v, None
                if page_size is not None:
                    cache_k, cache_v, table = self.paged(k, v, page_size, False, cached)
                seqlens = torch.tensor(cached, dtype=torch.int32, device="cuda")
                o = attnjit.attention_with_kvcache(q, cache_k, cache_v, seqlens, table,
                                                   k=k_new, v=v_new, causal=True)
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(seqlens.cpu(), torch.tensor(cached, dtype=torch.int32)))
                got_k = self.logical(cache_k, table, capacity)
                got_v = self.logical(cache_v, table, capacity)
                for b, t in enumerate(total):
                    # NaN rows compare by their bits: the cache must hold exactly what it held.
                    self.assertTrue(torch.equal(got_k[b, :t].view(torch.int16),
                                                expected_k[b, :t].view(torch.int16)))
                    self.assertTrue(torch.equal(got_v[b, :t].view(torch.int16),
                                                expected_v[b, :t].view(torch.int16)))
                (want, _), (lowp, _) = references(q, expected_k, expected_v, total, causal=True,
                                                  scale=1.0 / math.sqrt(d))
                self.check(f"append new={new} page={page_size}", o, want, lowp)

    def test_ragged_new_tokens(self):
        """cu_seqlens_q packs 0 to 8 new tokens per sequence (speculative decoding), causal
        among them: each sequence's rows of o and columns of the LSE equal its own reference,
        for every split count; with k= and v= (packed the same way) each sequence appends its
        own rows, bit for bit. The paged cases add causal document vectors, whose rows are the
        tokens' positions (each sequence's own)."""
        for page_size in (None, 16):
            for append in (False, True):
                self.ragged_case([1, 8, 0, 3, 5, 2], page_size, append,
                                 vectors=page_size is not None,
                                 splits=(0, 1, 3) if not append else (0,))

    def test_ragged_chunked_prefill(self):
        """Ragged chunked prefill: cu_seqlens_q packs 0 to 300 new tokens per sequence (a
        sequence of one token among them, counts not tile multiples), which the prefill kernel
        takes (checked by name) and the decode kernel too (num_splits=1): each sequence's rows
        and LSE columns equal its reference, and appends land bit for bit."""
        for page_size in (None, 16, 64):
            for append in (False, True):
                self.ragged_case([1, 300, 0, 131, 77, 256], page_size, append, vectors=False,
                                 splits=(0, 1), kernels={0: "attnjit_prefill_",
                                                         1: "attnjit_decode_"})

    def ragged_case(self, counts, page_size, append, *, vectors, splits, kernels=None,
                    predicate=None):
        """One packed batch of `counts` new tokens (shuffled) over caches of 32 query heads over
        8 KV heads, d128, causal; `vectors`: causal document vectors too; `predicate`: a
        predicate's builder (run_case's) in place of causal; `kernels`: {split count: the
        prefix of a kernel's name that call must launch}."""
        batch, capacity, heads, kv_heads, d = len(counts), 400, 32, 8, 128
        scale = 1.0 / math.sqrt(d)
        counts = list(counts)
        self.rng.shuffle(counts)
        # Keys per sequence, new ones included: one holds only its new tokens.
        lengths = [c + (0 if i == 0 else self.rng.randint(1, capacity - max(counts)))
                   for i, c in enumerate(counts)]
        label = f"page={page_size} append={append} counts={counts} lengths={lengths}"
        indices = self.documents(1)(lengths, capacity) if vectors else None
        mask, visible_fn = predicate(capacity) if predicate is not None else (None, None)
        cu = [0]
        for c in counts:
            cu.append(cu[-1] + c)
        q = self.randn(cu[-1], heads, d)
        k, v = self.caches(batch, capacity, kv_heads, d, d, lengths, torch.bfloat16)
        k_new = v_new = None
        cached = lengths
        given_k, given_v = k, v
        if append:
            cached = [length - c for length, c in zip(lengths, counts)]
            k_new = torch.cat([k[b, cached[b]:lengths[b]] for b in range(batch)])
            v_new = torch.cat([v[b, cached[b]:lengths[b]] for b in range(batch)])
            given_k, given_v = k.clone(), v.clone()
            for b in range(batch):
                given_k[b, cached[b]:] = math.nan
                given_v[b, cached[b]:] = math.nan
        cache_k, cache_v, table = given_k, given_v, None
        if page_size is not None:
            cache_k, cache_v, table = self.paged(given_k, given_v, page_size, False, cached)
        seqlens = torch.tensor(cached, dtype=torch.int32, device="cuda")
        cu_seqlens_q = torch.tensor(cu, dtype=torch.int32, device="cuda")
        for splits_count in splits:
            def call():
                return attnjit.attention_with_kvcache(
                    q, cache_k, cache_v, seqlens, table, k=k_new, v=v_new, causal=mask is None,
                    num_splits=splits_count, return_lse=True, cu_seqlens_q=cu_seqlens_q,
                    max_seqlen_q=max(counts), startend_row_indices=indices, mask=mask)
            if kernels and splits_count in kernels:
                launched = self.launched_kernels(call)
                self.assertTrue(any(name.startswith(kernels[splits_count]) for name in launched),
                                f"{label} splits={splits_count}: launched {sorted(launched)}")
            o, lse = call()
            torch.cuda.synchronize()
            self.assertEqual(tuple(o.shape), (cu[-1], heads, d))
            self.assertEqual(tuple(lse.shape), (heads, cu[-1]))
            for b in range(batch):
                if counts[b] == 0:
                    continue
                rows = slice(cu[b], cu[b + 1])
                (want_o, want_lse), (lowp_o, _) = references(
                    q[rows].unsqueeze(0), k[b:b + 1], v[b:b + 1], [lengths[b]],
                    causal=mask is None, scale=scale,
                    vectors=None if indices is None else indices[b:b + 1],
                    visible_fn=None if visible_fn is None else
                    lambda _, h, position, key, b=b: visible_fn(b, h, position, key))
                where = f"{label} splits={splits_count} sequence {b}"
                self.check(f"{where}: o", o[rows], want_o[0], lowp_o[0])
                self.check(f"{where}: lse", lse[:, rows], want_lse[0], want_lse[0])
        if append:
            got_k = self.logical(cache_k, table, capacity)
            got_v = self.logical(cache_v, table, capacity)
            for b, length in enumerate(lengths):
                self.assertTrue(torch.equal(got_k[b, :length].view(torch.int16),
                                            k[b, :length].view(torch.int16)), label)
                self.assertTrue(torch.equal(got_v[b, :length].view(torch.int16),
                                            v[b, :length].view(torch.int16)), label)

    def test_graph_replay_with_new_lengths(self):
        batch, capacity, heads, kv_heads, d = 4, 2000, 32, 8, 128
        q = self.randn(batch, 1, heads, d)
        k, v = self.caches(batch, capacity, kv_heads, d, d, [capacity] * batch, torch.bfloat16)
        seqlens = torch.full((batch,), capacity, dtype=torch.int32, device="cuda")
        for splits in (1, 6):
            call = lambda: attnjit.attention_with_kvcache(  # noqa: E731
                q, k, v, seqlens, num_splits=splits, causal=True)
            call()  # compiles outside the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                o = call()
            for _ in range(2):
                lengths = draw_lengths(self.rng, batch, capacity, 1)
                seqlens.copy_(torch.tensor(lengths, dtype=torch.int32))
                q.copy_(self.randn(*q.shape))
                graph.replay()
                torch.cuda.synchronize()
                (want, _), (lowp, _) = references(q, k, v, lengths, causal=True,
                                                  scale=1.0 / math.sqrt(d))
                self.check(f"graph replay splits={splits} lengths={lengths}", o, want, lowp)

    def test_bad_arguments(self):
        q = self.randn(2, 1, 8, 64)
        k = self.randn(2, 100, 2, 64)
        lengths = torch.tensor([100, 50], dtype=torch.int32, device="cuda")
        cases = (
            (dict(k_cache=k, v_cache=k, cache_seqlens=lengths.float()), "cache_seqlens.dtype"),
            (dict(k_cache=k, v_cache=k, cache_seqlens=lengths[:1]), "cache_seqlens.shape[0]"),
            (dict(k_cache=k, v_cache=k, cache_seqlens=lengths, num_splits=1000), "num_splits"),
            (dict(k_cache=self.randn(4, 24, 2, 64), v_cache=self.randn(4, 24, 2, 64),
                  block_table=torch.zeros(2, 5, dtype=torch.int32, device="cuda")),
             "page_size"),
        )
        for arguments, field in cases:
            with self.subTest(field=field):
                with self.assertRaisesRegex(attnjit.AttnjitError, field.replace("[", r"\[")):
                    attnjit.attention_with_kvcache(q, **arguments)


@unittest.skipUnless(HAS_OPS, "needs PyTorch 2.4+ (torch.library.custom_op) and a CUDA device")
class KvCacheOperatorTest(KvCacheCase):
    """attention_with_kvcache through torch.ops.attnjit.attention_with_kvcache and
    attention_with_kvcache_append."""

    BATCH, CAPACITY, HEADS, KV_HEADS, HEAD_DIM, NEW, PAGE = 3, 160, 8, 2, 64, 2, 16

    def setUp(self):
        super().setUp()
        torch._dynamo.reset()

    def decode_inputs(self, paged, finite=False, lengths=None):
        """q, the caches (page pools when paged; NaN past each length unless finite), the block
        table (None when contiguous), cache_seqlens and the lengths (drawn unless given)."""
        batch, capacity, kv_heads, d = self.BATCH, self.CAPACITY, self.KV_HEADS, self.HEAD_DIM
        if lengths is None:
            lengths = draw_lengths(self.rng, batch, capacity, self.NEW)
        q = self.randn(batch, self.NEW, self.HEADS, d)
        if finite:
            k, v = (self.randn(batch, capacity, kv_heads, d) for _ in range(2))
        else:
            k, v = self.caches(batch, capacity, kv_heads, d, d, lengths, torch.bfloat16)
        table = None
        if paged:
            k, v, table = self.paged(k, v, self.PAGE, False, lengths)
        seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        return q, k, v, seqlens, table, lengths

    def test_compile_fullgraph_equals_eager(self):
        # fullgraph=True fails on a graph break; the same kernels give the same bits.
        # mask: causal, document vectors, or a predicate whose tensor is a graph input.
        ids = (torch.arange(self.CAPACITY, device="cuda", dtype=torch.int32) // 40).view(1, -1)
        predicate = attnjit.predicate("doc[q] == doc[k] && k <= q", tensors={"doc": ids})
        for paged, return_lse, mask in ((False, False, "causal"), (True, True, "causal"),
                                        (True, False, "vectors"), (True, True, "predicate")):
            with self.subTest(paged=paged, return_lse=return_lse, mask=mask):
                torch._dynamo.reset()
                inputs = self.decode_inputs(paged)[:5] + (ids,)
                indices = (self.documents(1)([self.CAPACITY] * self.BATCH, self.CAPACITY)
                           if mask == "vectors" else None)

                def step(q, k_cache, v_cache, seqlens, table, doc):
                    bound = predicate.bind(doc=doc) if mask == "predicate" else None
                    return attnjit.attention_with_kvcache(q, k_cache, v_cache, seqlens, table,
                                                          causal=mask != "predicate",
                                                          num_splits=None,
                                                          return_lse=return_lse,
                                                          startend_row_indices=indices,
                                                          mask=bound)

                eager = step(*inputs)
                compiled = torch.compile(step, fullgraph=True)(*inputs)
                if not return_lse:
                    eager, compiled = (eager,), (compiled,)
                self.assertEqual(len(compiled), len(eager))
                for name, got, want in zip(("o", "lse"), compiled, eager):
                    self.assertEqual((got.shape, got.stride(), got.dtype),
                                     (want.shape, want.stride(), want.dtype), name)
                    self.assertTrue(torch.equal(got, want), f"{name} differs from eager")

    def test_compiled_append_writes_the_callers_caches(self):
        batch, capacity, new = self.BATCH, self.CAPACITY, self.NEW
        for paged in (False, True):
            with self.subTest(paged=paged):
                torch._dynamo.reset()
                cached = [0, 37, capacity - new]
                q, cache_k, cache_v, seqlens, table, _ = self.decode_inputs(paged,
                                                                            lengths=cached)
                k_new, v_new = (self.randn(batch, new, self.KV_HEADS, self.HEAD_DIM)
                                for _ in range(2))
                expected_k = self.logical(cache_k, table, capacity).clone()
                expected_v = self.logical(cache_v, table, capacity).clone()
                for b, c in enumerate(cached):
                    expected_k[b, c:c + new] = k_new[b]
                    expected_v[b, c:c + new] = v_new[b]

                def step(q, k_cache, v_cache, seqlens, table, k_new, v_new):
                    return attnjit.attention_with_kvcache(q, k_cache, v_cache, seqlens, table,
                                                          k=k_new, v=v_new, causal=True)

                eager_k, eager_v = cache_k.clone(), cache_v.clone()
                eager = step(q, eager_k, eager_v, seqlens, table, k_new, v_new)
                compiled = torch.compile(step, fullgraph=True)(q, cache_k, cache_v, seqlens,
                                                               table, k_new, v_new)
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(compiled, eager), "o differs from eager")
                # The NaN rows past the lengths compare by their bits.
                for name, got, want in (("k_cache", cache_k, eager_k),
                                        ("v_cache", cache_v, eager_v)):
                    self.assertTrue(torch.equal(got.view(torch.int16), want.view(torch.int16)),
                                    f"{name} differs from eager's")
                for name, got, want in (("k_cache", cache_k, expected_k),
                                        ("v_cache", cache_v, expected_v)):
                    got = self.logical(got, table, capacity)
                    self.assertTrue(torch.equal(got.view(torch.int16), want.view(torch.int16)),
                                    f"{name} does not hold the appended rows")
                self.assertEqual(seqlens.tolist(), cached)
                (want, _), (lowp, _) = references(q, expected_k, expected_v,
                                                  [c + new for c in cached], causal=True,
                                                  scale=1.0 / math.sqrt(self.HEAD_DIM))
                self.check(f"compiled append paged={paged}", compiled, want, lowp)

    def test_compiled_step_in_a_cuda_graph_replays_new_lengths_and_tables(self):
        batch, kv_heads, d, page = self.BATCH, self.KV_HEADS, self.HEAD_DIM, self.PAGE
        pages = self.CAPACITY // page
        pool = 2 * batch * pages  # twice what the tables hold: new tables point elsewhere
        pool_k, pool_v = (self.randn(pool, page, kv_heads, d) for _ in range(2))
        q = self.randn(batch, 1, self.HEADS, d)
        seqlens = torch.zeros(batch, dtype=torch.int32, device="cuda")
        table = torch.zeros(batch, pages, dtype=torch.int32, device="cuda")

        def draw():
            """New lengths, tables and queries, written into the captured tensors."""
            lengths = draw_lengths(self.rng, batch, self.CAPACITY, 1)
            order = self.rng.sample(range(pool), batch * pages)
            seqlens.copy_(torch.tensor(lengths, dtype=torch.int32))
            table.copy_(torch.tensor(order, dtype=torch.int32).view(batch, pages))
            q.copy_(self.randn(*q.shape))
            return lengths

        @torch.compile(fullgraph=True)
        def step(q, k_cache, v_cache, seqlens, table):
            return attnjit.attention_with_kvcache(q, k_cache, v_cache, seqlens, table,
                                                  causal=True, num_splits=4)

        draw()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # compiles the function and the kernels outside the capture
                step(q, pool_k, pool_v, seqlens, table)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            o = step(q, pool_k, pool_v, seqlens, table)
        for _ in range(2):
            lengths = draw()
            graph.replay()
            torch.cuda.synchronize()
            k = self.logical(pool_k, table, self.CAPACITY)
            v = self.logical(pool_v, table, self.CAPACITY)
            (want, _), (lowp, _) = references(q, k, v, lengths, causal=True,
                                              scale=1.0 / math.sqrt(d))
            self.check(f"compiled graph replay lengths={lengths}", o, want, lowp)

    def test_fake_tensors_raise_the_eager_error(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        message = r"^q.dim\(\): got 3; accepted: 4 \(\[batch, seqlen_q, heads, head_dim\]\)$"
        # cu_seqlens_q, max_seqlen_q, mask, startend_row_indices, alibi_slopes, predicate_tensors,
        # predicate_scalars, predicate_names, scale, window_left, window_right, softcap, sinks,
        # num_splits, return_lse
        scalars = (None, 0, "none", None, None, [], [], "", 0.0, -1, 0, 0.0, None, 0, False)
        ops = torch.ops.attnjit
        for mode in (None, FakeTensorMode):
            with self.subTest(fake=mode is not None), mode() if mode else contextlib.nullcontext():
                q = torch.empty(2, 8, 64, dtype=torch.bfloat16, device="cuda")  # no seqlen_q
                cache = torch.empty(2, 100, 2, 64, dtype=torch.bfloat16, device="cuda")
                calls = [lambda: attnjit.attention_with_kvcache(q, cache, cache)]
                if mode:  # the operators' fake implementations run the same checks
                    calls += [lambda: ops.attention_with_kvcache(q, cache, cache, None, None,
                                                                 *scalars),
                              lambda: ops.attention_with_kvcache_append(
                                  q, cache, cache, None, None, cache, cache, *scalars)]
                for call in calls:
                    with self.assertRaisesRegex(attnjit.AttnjitError, message):
                        call()

    def test_opcheck(self):
        q, cache_k, cache_v, seqlens, table, _ = self.decode_inputs(True, finite=True)
        k_new, v_new = (self.randn(self.BATCH, self.NEW, self.KV_HEADS, self.HEAD_DIM)
                        for _ in range(2))
        # mask, startend_row_indices, alibi_slopes, predicate_tensors, predicate_scalars,
        # predicate_names, scale, window_left, window_right, softcap, sinks, num_splits,
        # return_lse
        scalars = ("causal", None, None, [], [], "", 0.0, -1, 0, 0.0, None, 3, True)
        documents = self.documents(1)([self.CAPACITY] * self.BATCH, self.CAPACITY)
        slopes = torch.rand(self.HEADS, device="cuda")
        masked = ("flashmask(causal=true,columns=1)", documents, slopes) + scalars[3:]
        ids = (torch.arange(self.CAPACITY, device="cuda", dtype=torch.int32) // 50).view(1, -1)
        predicate = attnjit.predicate("doc[q] == doc[k] && k <= q + 3", tensors={"doc": ids})
        predicated = (predicate.mask_text, None, None,
                      [predicate.tensors[name] for name in predicate.names],
                      list(predicate.scalars), " ".join(predicate.names)) + scalars[6:]
        # Ragged new tokens: the same rows packed, every sequence with NEW of them.
        packed = q.reshape(-1, *q.shape[2:])
        cu = torch.arange(0, packed.shape[0] + 1, self.NEW, dtype=torch.int32, device="cuda")
        ops = torch.ops.attnjit
        cases = (("padded", ops.attention_with_kvcache.default,
                  (q, cache_k, cache_v, seqlens, table, None, 0) + scalars),
                 ("ragged", ops.attention_with_kvcache.default,
                  (packed, cache_k, cache_v, seqlens, table, cu, self.NEW) + scalars),
                 ("append", ops.attention_with_kvcache_append.default,
                  (q, cache_k, cache_v, seqlens, table, k_new, v_new, None, 0) + scalars),
                 ("vectors", ops.attention_with_kvcache.default,
                  (q, cache_k, cache_v, seqlens, table, None, 0) + masked),
                 ("predicate", ops.attention_with_kvcache.default,
                  (q, cache_k, cache_v, seqlens, table, None, 0) + predicated))
        for label, op, arguments in cases:
            with self.subTest(op=op.name(), case=label):
                torch.library.opcheck(op, arguments)  # every test, inputs without gradients
                # The registration test runs only when an input requires a gradient.
                grad = (arguments[0].detach().clone().requires_grad_(),) + arguments[1:]
                torch.library.opcheck(op, grad, test_utils="test_autograd_registration")


if __name__ == "__main__":
    unittest.main()
