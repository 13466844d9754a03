"""attnjit.attention_with_kvcache on a CUDA device, against a float64 reference computed
sequence by sequence from the keys each sequence holds.

Skipped unless PyTorch and a CUDA device are available. Each case draws a batch of sequences
with ragged cached lengths (0, 1, the whole capacity and lengths that are not tile multiples),
1 to 5 new tokens per sequence, GQA ratios 1 to 16, and compares o and lse with the reference:
for sequence b with L_b keys and Sq new tokens (the last Sq of its keys), off = L_b - Sq,
token i sees key j when causal keeps j <= i + off and a window (left, right) keeps
i + off - left <= j <= i + off + right; soft-capping, sinks and the scale as in
attnjit.attention. Rows that see no key give o = 0 and lse = -inf (the sink's logit with
sinks). The criterion is FlashAttention's: max|attnjit - ref| <= 2 * max|lowp - ref| +
1e-3 * max|ref|, lowp the same computation with the probabilities rounded to the inputs' dtype.

The cache's rows past each sequence's length hold NaN: they must never reach the output. Paged
caches (page sizes 1 to 256) take random page tables, some pages shared between sequences.
Every forced split count gives the unsplit result within the output's rounding. Appended keys
(k=, v=) land in the cache bit for bit at each sequence's length. A CUDA graph captured once
replays with new lengths and cache contents of the same shapes.

The data are fresh on every run; the seed is printed, and ATTNJIT_TEST_SEED=<number> repeats a
run.

Run: ATTNJIT_LIBRARY=build/libattnjit.so python3 -m unittest discover -s tools/python/tests \
         -p test_kvcache_gpu.py -v
"""

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


def reference(q, k, v, lengths, *, causal, window, softcap, sinks, scale, lowp):
    """o [B, Sq, H, Dv] and lse [B, H, Sq] in float64 (lowp: the probabilities rounded to q's
    dtype before P V, as the kernels do), from contiguous caches k/v [B, capacity, Hkv, D]."""
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
        visible = torch.ones(seqlen_q, length, dtype=torch.bool, device=q.device)
        left, right = window
        if causal:
            right = 0
        if left >= 0:
            visible &= j >= i + off - left
        if right >= 0:
            visible &= j <= i + off + right
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
        lse[b] = total
    return o, lse


def references(q, k, v, lengths, *, causal, window=(-1, -1), softcap=None, sinks=None, scale):
    """(reference, lowp) of reference(): float64, and with the probabilities rounded."""
    arguments = dict(causal=causal, window=window, softcap=softcap, sinks=sinks, scale=scale)
    return (reference(q, k, v, lengths, lowp=False, **arguments),
            reference(q, k, v, lengths, lowp=True, **arguments))


@unittest.skipUnless(HAS_CUDA, "needs PyTorch with a CUDA device")
class KvCacheTest(TemporaryCacheTest):
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

    def run_case(self, *, batch, capacity, heads, kv_heads, head_dim, head_dim_v=None,
                 new_tokens, causal=False, window=(-1, -1), softcap=None, with_sinks=False,
                 page_size=None, shared=False, splits=(0, 1, 3), dtype=None):
        dtype = torch.bfloat16 if dtype is None else dtype
        head_dim_v = head_dim_v or head_dim
        lengths = draw_lengths(self.rng, batch, capacity, new_tokens)
        label = (f"B={batch} cap={capacity} H={heads}/{kv_heads} d={head_dim}/{head_dim_v} "
                 f"Sq={new_tokens} causal={causal} window={window} softcap={softcap} "
                 f"sinks={with_sinks} page={page_size} lengths={lengths}")
        q = self.randn(batch, new_tokens, heads, head_dim, dtype=dtype)
        k, v = self.caches(batch, capacity, kv_heads, head_dim, head_dim_v, lengths, dtype)
        sinks = self.randn(heads, dtype=torch.float32) if with_sinks else None
        cache_k, cache_v, table = k, v, None
        if page_size is not None:
            cache_k, cache_v, table = self.paged(k, v, page_size, shared, lengths)
        seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        scale = 1.0 / math.sqrt(head_dim)
        (want_o, want_lse), (lowp_o, _) = references(q, k, v, lengths, causal=causal,
                                                     window=window, softcap=softcap, sinks=sinks,
                                                     scale=scale)
        outputs = {}
        for count in splits:
            o, lse = attnjit.attention_with_kvcache(
                q, cache_k, cache_v, seqlens, table, causal=causal, window_size=window,
                softcap=softcap, sinks=sinks, num_splits=count, return_lse=True)
            torch.cuda.synchronize()
            self.check(f"{label} splits={count}: o", o, want_o, lowp_o)
            self.check(f"{label} splits={count}: lse", lse, want_lse, want_lse)
            outputs[count] = o.double()
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

    def test_long_cache_many_splits(self):
        self.run_case(batch=3, capacity=5000, heads=32, kv_heads=8, head_dim=128, new_tokens=1,
                      splits=(1, 0, 2, 7, 64))
        self.run_case(batch=2, capacity=4099, heads=8, kv_heads=2, head_dim=64, new_tokens=5,
                      causal=True, splits=(1, 0, 13), dtype=torch.float16)

    def test_modifiers(self):
        for softcap, sinks in ((30.0, False), (None, True), (20.0, True)):
            with self.subTest(softcap=softcap, sinks=sinks):
                self.run_case(batch=4, capacity=700, heads=32, kv_heads=8, head_dim=128,
                              new_tokens=2, causal=True, softcap=softcap, with_sinks=sinks,
                              splits=(1, 5))

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
        # A paged cache holds whole pages (max_pages x page_size keys): 304 for both sizes.
        batch, capacity, heads, kv_heads, d, new = 4, 304, 16, 4, 64, 3
        for page_size in (None, 1, 16):
            with self.subTest(page_size=page_size):
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
                if page_size is None:
                    got_k, got_v = cache_k, cache_v
                else:
                    pages = table.long().cpu()
                    got_k = torch.stack([cache_k[pages[b]].reshape(-1, kv_heads, d)[:capacity]
                                         for b in range(batch)])
                    got_v = torch.stack([cache_v[pages[b]].reshape(-1, kv_heads, d)[:capacity]
                                         for b in range(batch)])
                for b, t in enumerate(total):
                    # NaN rows compare by their bits: the cache must hold exactly what it held.
                    self.assertTrue(torch.equal(got_k[b, :t].view(torch.int16),
                                                expected_k[b, :t].view(torch.int16)))
                    self.assertTrue(torch.equal(got_v[b, :t].view(torch.int16),
                                                expected_v[b, :t].view(torch.int16)))
                (want, _), (lowp, _) = references(q, expected_k, expected_v, total, causal=True,
                                                  scale=1.0 / math.sqrt(d))
                self.check(f"append page={page_size}", o, want, lowp)

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


if __name__ == "__main__":
    unittest.main()
