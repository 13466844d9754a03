"""attnjit.attention_with_kvcache over FP8 caches (torch.float8_e4m3fn k_cache and v_cache,
kv_dtype=e4m3) on a CUDA device of sm_89 or later, against the float64 reference of
test_kvcache_gpu.py computed on the dequantized cache (K = k_cache * k_descale, V = v_cache *
v_descale).

Skipped unless PyTorch and a CUDA device of compute capability 8.9 or more are available. The
cases draw ragged cached lengths, 1 to 4 new tokens, GQA ratios 1 to 8, head dims 64, 128 and
256, contiguous and paged caches (pages of 1, 16 and 64, random tables, a shared first page),
descales per tensor ([1]) and per sequence and KV head ([B, Hkv]), every mask kind (causal, a
window, FlashMask vectors, an element predicate), soft-capping, ALiBi and sinks, and the split
counts 0, 1 and 3 (which agree within the output's rounding). The cache's rows past each
length hold NaN. The bound is test_kvcache_gpu.py's (twice the error of the reference with its
probabilities and output rounded to q's dtype, plus 1e-3 of the output's size). Appended keys
(e4m3 k= and v=) land in the cache bit for bit. torch.compile(fullgraph=True) gives eager's
bits. Bad descales and mixed cache dtypes raise errors naming them.

The data are fresh on every run; the seed is printed, and ATTNJIT_TEST_SEED=<number> repeats a
run.

Run: ATTNJIT_LIBRARY=build/libattnjit.so python3 -m unittest discover -s tools/python/tests \
         -p test_kvcache_fp8_gpu.py -v
"""

import math
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402
import test_kvcache_gpu  # noqa: E402
from test_kvcache_gpu import SEED, KvCacheCase, draw_lengths, references  # noqa: E402
from torch_cuda import HAS_CUDA, torch  # noqa: E402

HAS_FP8 = (HAS_CUDA and hasattr(torch, "float8_e4m3fn")
           and torch.cuda.get_device_capability() >= (8, 9))
HAS_OPS = HAS_FP8 and attnjit._ops is not None


@unittest.skipUnless(HAS_FP8, "needs PyTorch with float8_e4m3fn and a CUDA device of sm_89+")
class Fp8KvCacheTest(KvCacheCase):
    # The 16-bit tests' predicates (the module, not its test class, is imported: a test class
    # in this module's namespace would run here too).
    predicate_documents = staticmethod(test_kvcache_gpu.KvCacheTest.predicate_documents)
    predicate_band = staticmethod(test_kvcache_gpu.KvCacheTest.predicate_band)

    def quantized(self, x, per_head):
        """(e4m3 values, fp32 descales, the dequantized float32 tensor) of x [B, L, Hkv, D]:
        one descale per (sequence, KV head) or one for the tensor, each maps its largest |x|
        (NaN rows aside) to 448."""
        finite = torch.nan_to_num(x.float(), nan=0.0).abs()
        amax = finite.amax(dim=(1, 3)) if per_head else finite.amax().reshape(1)
        descale = (amax.clamp(min=1e-6) / 448.0).float().contiguous()
        shape = (x.shape[0], 1, x.shape[2], 1) if per_head else (1, 1, 1, 1)
        values = (x.float() / descale.view(shape)).to(torch.float8_e4m3fn)
        return values, descale, values.float() * descale.view(shape)

    def run_fp8(self, *, batch, capacity, heads, kv_heads, head_dim, new_tokens, per_head,
                causal=False, window=(-1, -1), softcap=None, with_sinks=False, alibi=False,
                page_size=None, vectors=None, predicate=None, splits=(0, 1, 3), q_dtype=None):
        lengths = draw_lengths(self.rng, batch, capacity, new_tokens)
        label = (f"B={batch} cap={capacity} H={heads}/{kv_heads} d={head_dim} Sq={new_tokens} "
                 f"per_head={per_head} causal={causal} window={window} softcap={softcap} "
                 f"sinks={with_sinks} alibi={alibi} page={page_size} q={q_dtype} "
                 f"lengths={lengths}")
        q = self.randn(batch, new_tokens, heads, head_dim, dtype=q_dtype)
        # Keys of several sizes per head (what per-head descales are for).
        spread = torch.rand(1, 1, kv_heads, 1, generator=self.generator, device="cuda") * 4 + 0.25
        k = (self.randn(batch, capacity, kv_heads, head_dim, dtype=torch.float32) * spread)
        v = self.randn(batch, capacity, kv_heads, head_dim, dtype=torch.float32)
        k8, k_descale, k_real = self.quantized(k, per_head)
        v8, v_descale, v_real = self.quantized(v, per_head)
        # The stored values as float32 (exact), NaN past each length; paging them keeps them.
        k_stored, v_stored = k8.float(), v8.float()
        for b, length in enumerate(lengths):
            k_stored[b, length:] = math.nan
            v_stored[b, length:] = math.nan
        table = None
        cache_k, cache_v = k_stored, v_stored
        if page_size is not None:
            cache_k, cache_v, table = self.paged(k_stored, v_stored, page_size, True, lengths)
            # A shared first page copied sequence 0's values into sequence 1's.
            shape = (batch, 1, kv_heads, 1) if per_head else (1, 1, 1, 1)
            k_real = k_stored * k_descale.view(shape)
            v_real = v_stored * v_descale.view(shape)
        cache_k = cache_k.to(torch.float8_e4m3fn)
        cache_v = cache_v.to(torch.float8_e4m3fn)
        seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        sinks = self.randn(heads, dtype=torch.float32) if with_sinks else None
        slopes = (torch.pow(2.0, -8.0 * torch.arange(1, heads + 1, device="cuda") / heads)
                  if alibi else None)
        rows = capacity if table is None else table.shape[1] * page_size
        indices = vectors(lengths, rows) if vectors is not None else None
        mask, visible_fn = predicate(rows) if predicate is not None else (None, None)
        scale = 1.0 / math.sqrt(head_dim)
        (want_o, want_lse), (lowp_o, _) = references(
            q, torch.nan_to_num(k_real), torch.nan_to_num(v_real), lengths, causal=causal,
            window=window, softcap=softcap, sinks=sinks, scale=scale, vectors=indices,
            slopes=slopes, visible_fn=visible_fn)
        outputs = {}
        for count in splits:
            o, lse = attnjit.attention_with_kvcache(
                q, cache_k, cache_v, seqlens, table, causal=causal, window_size=window,
                softcap=softcap, sinks=sinks, num_splits=count, return_lse=True,
                startend_row_indices=indices, alibi_slopes=slopes, mask=mask,
                k_descale=k_descale, v_descale=v_descale)
            torch.cuda.synchronize()
            self.check(f"{label} splits={count}: o", o, want_o, lowp_o)
            self.check(f"{label} splits={count}: lse", lse, want_lse, want_lse)
            outputs[count] = o.double()
        base = outputs[splits[0]]
        ulp = torch.finfo(q.dtype).eps * max(1.0, base.abs().max().item())
        for count, o in outputs.items():
            self.assertLessEqual((o - base).abs().max().item(), ulp,
                                 f"{label}: splits {count} against {splits[0]}")

    def test_head_dims_layouts_and_descales(self):
        for head_dim in (64, 128, 256):
            for page_size in (None, 16):
                for per_head in (True, False):
                    with self.subTest(head_dim=head_dim, page_size=page_size, per_head=per_head):
                        self.run_fp8(batch=4, capacity=700, heads=32, kv_heads=8,
                                     head_dim=head_dim, new_tokens=1, per_head=per_head,
                                     page_size=page_size)

    def test_masks_and_modifiers(self):
        cases = (
            dict(causal=True, new_tokens=4),
            dict(window=(100, 0), new_tokens=3),
            dict(causal=True, new_tokens=2, softcap=20.0, alibi=True, with_sinks=True),
            dict(new_tokens=1, causal=True, vectors=self.documents(1)),
            dict(new_tokens=3, causal=True, vectors=self.intervals(2, True, 2)),
            dict(new_tokens=2, vectors=self.intervals(4, False, 1)),
        )
        for case in cases:
            for head_dim in (64, 128):
                with self.subTest(head_dim=head_dim, **{k: str(v) for k, v in case.items()}):
                    self.run_fp8(batch=3, capacity=520, heads=16, kv_heads=2, head_dim=head_dim,
                                 per_head=True, page_size=64, **case)

    def test_predicates_and_gqa_ratios(self):
        for heads, kv_heads in ((8, 8), (16, 2), (32, 4)):
            for predicate in (self.predicate_documents(3), self.predicate_band):
                with self.subTest(heads=heads, kv_heads=kv_heads):
                    self.run_fp8(batch=3, capacity=400, heads=heads, kv_heads=kv_heads,
                                 head_dim=128, new_tokens=2, per_head=False, predicate=predicate)

    def test_fp16_queries_of_every_size(self):
        """fp16 q (and o); rows of queries far from 1 in size: Q's rows are scaled to fp16's
        range by powers of two, which the scores take back."""
        for head_dim in (64, 128):
            with self.subTest(head_dim=head_dim):
                self.run_fp8(batch=3, capacity=300, heads=16, kv_heads=4, head_dim=head_dim,
                             new_tokens=2, per_head=True, causal=True, q_dtype=torch.float16)
        original = self.randn
        for size in (1e-4, 300.0):
            self.randn = lambda *shape, dtype=None, size=size: original(*shape, dtype=dtype) * size
            try:
                with self.subTest(size=size):
                    self.run_fp8(batch=2, capacity=200, heads=8, kv_heads=2, head_dim=128,
                                 new_tokens=1, per_head=False, softcap=None)
            finally:
                self.randn = original

    def test_pages_of_one(self):
        self.run_fp8(batch=2, capacity=300, heads=8, kv_heads=2, head_dim=128, new_tokens=1,
                     per_head=True, page_size=1, causal=True)

    def test_append(self):
        """e4m3 k= and v= land in the cache bit for bit; the attention covers them."""
        batch, capacity, heads, kv_heads, d, new = 3, 256, 16, 4, 128, 2
        for page_size in (None, 16):
            with self.subTest(page_size=page_size):
                cached = [0, 7, 140]
                total = [c + new for c in cached]
                q = self.randn(batch, new, heads, d)
                k_stored = self.randn(batch, capacity, kv_heads, d, dtype=torch.float32)
                v_stored = self.randn(batch, capacity, kv_heads, d, dtype=torch.float32)
                k_stored = k_stored.to(torch.float8_e4m3fn).float()
                v_stored = v_stored.to(torch.float8_e4m3fn).float()
                k_new = self.randn(batch, new, kv_heads, d).to(torch.float8_e4m3fn)
                v_new = self.randn(batch, new, kv_heads, d).to(torch.float8_e4m3fn)
                expected_k, expected_v = k_stored.clone(), v_stored.clone()
                for b, c in enumerate(cached):
                    expected_k[b, c:c + new] = k_new[b].float()
                    expected_v[b, c:c + new] = v_new[b].float()
                cache_k, cache_v, table = k_stored, v_stored, None
                if page_size is not None:
                    cache_k, cache_v, table = self.paged(k_stored, v_stored, page_size, False,
                                                         cached)
                cache_k = cache_k.to(torch.float8_e4m3fn)
                cache_v = cache_v.to(torch.float8_e4m3fn)
                seqlens = torch.tensor(cached, dtype=torch.int32, device="cuda")
                k_descale = torch.tensor([0.5], device="cuda")
                v_descale = torch.tensor([2.0], device="cuda")
                o = attnjit.attention_with_kvcache(q, cache_k, cache_v, seqlens, table,
                                                   k=k_new, v=v_new, causal=True,
                                                   k_descale=k_descale, v_descale=v_descale)
                torch.cuda.synchronize()
                got_k = self.logical(cache_k, table, capacity)
                got_v = self.logical(cache_v, table, capacity)
                for b, t in enumerate(total):
                    self.assertTrue(torch.equal(
                        got_k[b, :t].view(torch.uint8),
                        expected_k[b, :t].to(torch.float8_e4m3fn).view(torch.uint8)))
                    self.assertTrue(torch.equal(
                        got_v[b, :t].view(torch.uint8),
                        expected_v[b, :t].to(torch.float8_e4m3fn).view(torch.uint8)))
                (want, _), (lowp, _) = references(q, expected_k * 0.5, expected_v * 2.0, total,
                                                  causal=True, scale=1.0 / math.sqrt(d))
                self.check(f"fp8 append page={page_size}", o, want, lowp)

    def test_bad_arguments(self):
        q = self.randn(2, 1, 8, 64)
        k8 = self.randn(2, 100, 2, 64).to(torch.float8_e4m3fn)
        k16 = self.randn(2, 100, 2, 64)
        lengths = torch.tensor([100, 50], dtype=torch.int32, device="cuda")
        one = torch.ones(1, device="cuda")
        cases = (
            (dict(k_cache=k8, v_cache=k16), r"^v_cache: dtype torch.bfloat16 with k_cache of "
                                            r"torch.float8_e4m3fn"),
            (dict(k_cache=k16, v_cache=k16, k_descale=one), r"^k_descale: given with a cache of "
                                                            r"dtype torch.bfloat16"),
            (dict(k_cache=k8, v_cache=k8, k_descale=torch.ones(3, device="cuda")),
             r"^k_descale.shape: got '\[3\]'; accepted: \[2, 2\] contiguous"),
            (dict(k_cache=k8, v_cache=k8, v_descale=one.double()),
             r"^v_descale: dtype torch.float64; accepted: "),
            (dict(k_cache=k8, v_cache=k8, k_descale=one.cpu()), r"k_descale"),
            (dict(k_cache=self.randn(2, 100, 2, 96).to(torch.float8_e4m3fn),
                  v_cache=self.randn(2, 100, 2, 96).to(torch.float8_e4m3fn),
                  q=self.randn(2, 1, 8, 96)),
             r"^head_dim: got '96 with kv_dtype=e4m3'; accepted: 64, 128 or 256"),
        )
        for arguments, message in cases:
            with self.subTest(message=message):
                arguments.setdefault("q", q)
                with self.assertRaisesRegex((attnjit.AttnjitError, TypeError), message):
                    attnjit.attention_with_kvcache(cache_seqlens=lengths, **arguments)


@unittest.skipUnless(HAS_OPS, "needs PyTorch 2.4+, float8_e4m3fn and a CUDA device of sm_89+")
class Fp8KvCacheOperatorTest(KvCacheCase):
    def test_compile_fullgraph_equals_eager(self):
        batch, capacity, heads, kv_heads, d = 4, 512, 32, 8, 128
        lengths = torch.tensor([512, 1, 300, 77], dtype=torch.int32, device="cuda")
        q = self.randn(batch, 1, heads, d)
        k_cache = self.randn(batch, capacity, kv_heads, d).to(torch.float8_e4m3fn)
        v_cache = self.randn(batch, capacity, kv_heads, d).to(torch.float8_e4m3fn)
        k_descale = torch.rand(batch, kv_heads, generator=self.generator, device="cuda") + 0.5
        v_descale = torch.rand(batch, kv_heads, generator=self.generator, device="cuda") + 0.5

        def step(q, k_cache, v_cache, seqlens, k_descale, v_descale):
            return attnjit.attention_with_kvcache(q, k_cache, v_cache, seqlens, causal=True,
                                                  k_descale=k_descale, v_descale=v_descale,
                                                  return_lse=True)

        eager = step(q, k_cache, v_cache, lengths, k_descale, v_descale)
        compiled = torch.compile(step, fullgraph=True)(q, k_cache, v_cache, lengths, k_descale,
                                                       v_descale)
        torch.cuda.synchronize()
        for got, want in zip(compiled, eager):
            self.assertTrue(torch.equal(got, want), f"compiled differs (seed {SEED})")


if __name__ == "__main__":
    unittest.main()
