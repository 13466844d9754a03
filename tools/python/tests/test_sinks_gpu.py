"""Learnable attention sinks (sinks=) on a CUDA device: attnjit.attention, attnjit.forward and
attnjit.attention_varlen against a float64 reference whose softmax takes the sink as one more
column of each row (score t[h], value 0), with autograd giving every gradient, the sinks' too.

Skipped unless PyTorch and a CUDA device are available. The criterion is FlashAttention's, as in
test_autograd_gpu.py: max|attnjit - ref| <= 2 * max|lowp - ref| + 1e-3 * max|ref|, lowp the same
computation in bf16/fp16. Rows that see no key give o = 0 and lse = t[h]. Also: a sink far above
the scores (no overflow), the sinks' gradient bitwise repeatable, sinks that do not require a
gradient, and torch.compile(fullgraph=True) equal to eager.

The data are fresh on every run; the seed is printed, and ATTNJIT_TEST_SEED=<number> repeats a
run.

Run: ATTNJIT_LIBRARY=build/libattnjit.so python3 -m unittest discover -s tools/python/tests \
         -p test_sinks_gpu.py -v
"""

import itertools
import math
import random
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402
from cache_dir import TemporaryCacheTest  # noqa: E402
from torch_cuda import HAS_CUDA, run_seed, torch  # noqa: E402

HAS_OPS = HAS_CUDA and attnjit._ops is not None
DTYPES = ("bfloat16", "float16")
HEADS, KV_HEADS = 8, 2
SEED = run_seed()


def sink_attention(q, k, v, sinks, visible, scale):
    """(o [B, Sq, H, Dv], lse [B, H, Sq]) with the sinks as one more softmax column of value 0;
    q [B, Sq, H, D], k and v [B, Sk, Hkv, D], visible bool [B or 1, Sq, Sk]; differentiable in
    every input, the sinks included."""
    heads = q.shape[2]
    k = k.repeat_interleave(heads // k.shape[2], dim=2)
    v = v.repeat_interleave(heads // v.shape[2], dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    scores = scores.masked_fill(~visible[:, None], float("-inf"))
    column = sinks.to(scores.dtype).view(1, heads, 1, 1).expand(*scores.shape[:3], 1)
    extended = torch.cat([scores, column], dim=-1)
    probabilities = torch.softmax(extended, dim=-1)[..., :-1]
    o = torch.einsum("bhqk,bkhd->bqhd", probabilities, v)
    wide = torch.promote_types(scores.dtype, torch.float32)
    return o, torch.logsumexp(extended.to(wide), dim=-1)


def causal_visible(seqlen_q, seqlen_k, device):
    """Bottom-right causal: key j visible to query i iff j <= i + Sk - Sq."""
    rows = torch.arange(seqlen_q, device=device)[:, None]
    cols = torch.arange(seqlen_k, device=device)[None, :]
    return (cols <= rows + seqlen_k - seqlen_q)[None]


def documents(rng, seqlen, device):
    """(visible [1, S, S], startend_row_indices int32 [1, 1, S, 1]) of causal documents of
    random lengths: FlashMask's LTS of key j is the end of its document."""
    ends, start = [], 0
    while start < seqlen:
        start = min(seqlen, start + rng.randint(1, max(1, seqlen // 3)))
        ends.append(start)
    end_of = torch.empty(seqlen, dtype=torch.int32)
    begin = 0
    for end in ends:
        end_of[begin:end] = end
        begin = end
    rows = torch.arange(seqlen)[:, None]
    cols = torch.arange(seqlen)[None, :]
    visible = (cols <= rows) & (rows < end_of[None, :].long())
    return visible[None].to(device), end_of.view(1, 1, seqlen, 1).to(device)


def sink_logits(rng, heads, device, far=None):
    """fp32 [heads] sink logits in [-2, 3]; `far` puts that value on head 0."""
    values = [rng.uniform(-2.0, 3.0) for _ in range(heads)]
    if far is not None:
        values[0] = far
    return torch.tensor(values, dtype=torch.float32, device=device)


def setUpModule():
    if HAS_CUDA:
        print(f"\ntest_sinks_gpu: seed {SEED} (ATTNJIT_TEST_SEED={SEED} repeats this run)",
              flush=True)


class SinksCase(TemporaryCacheTest):
    def rng(self, *tags):
        return random.Random(f"{SEED}:{self.id()}:{tags}")

    def randn(self, rng, dtype, *shape):
        generator = torch.Generator().manual_seed(rng.randrange(2**63))
        return torch.randn(shape, generator=generator).to(device="cuda",
                                                          dtype=getattr(torch, dtype))

    def assert_close(self, name, out, ref, lowp):
        ref = ref.double()
        error = (out.double() - ref).abs().max().item()
        lowp_error = (lowp.double() - ref).abs().max().item()
        limit = 2 * lowp_error + 1e-3 * ref.abs().max().item()
        self.assertFalse(math.isnan(error), f"{name}: NaN (seed {SEED})")
        self.assertLessEqual(error, limit, f"{name}: max error {error:.3e}, low precision "
                             f"{lowp_error:.3e}, limit {limit:.3e} (seed {SEED})")

    def reference(self, inputs, sinks, d_o, visible, dtype, scale):
        """(o, lse, dq, dk, dv, d_sinks) of sink_attention on the inputs cast to `dtype`."""
        leaves = [t.detach().to(dtype).requires_grad_() for t in inputs]
        sink_leaf = sinks.detach().clone().requires_grad_()
        o, lse = sink_attention(*leaves, sink_leaf, visible, scale)
        o.backward(d_o.to(dtype))
        return (o.detach(), lse.detach()) + tuple(t.grad for t in leaves) + (sink_leaf.grad,)

    def compare(self, got, inputs, sinks, d_o, visible, dtype, scale):
        ref = self.reference(inputs, sinks, d_o, visible, torch.float64, scale)
        lowp = self.reference(inputs, sinks, d_o, visible, getattr(torch, dtype), scale)
        for name, out, r, low in zip(("o", "lse", "dq", "dk", "dv", "d_sinks"), got, ref, lowp):
            self.assertEqual(tuple(out.shape), tuple(r.shape), name)
            self.assert_close(name, out, r, low)


@unittest.skipUnless(HAS_CUDA, "needs PyTorch and a CUDA device")
class AttentionSinksTest(SinksCase):
    def run_attention(self, q, k, v, sinks, d_o, deterministic=False, **mask):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        sink_leaf = sinks.detach().clone().requires_grad_()
        o, lse = attnjit.attention(*leaves, sinks=sink_leaf, return_lse=True,
                                   deterministic=deterministic, **mask)
        o.backward(d_o)
        return (o.detach(), lse) + tuple(t.grad for t in leaves) + (sink_leaf.grad,)

    def test_masks_dtypes_head_dims_modes(self):
        for dtype, head_dim, mask, deterministic in itertools.product(
                DTYPES, (64, 128), ("causal", "documents"), (False, True)):
            with self.subTest(dtype=dtype, head_dim=head_dim, mask=mask,
                              deterministic=deterministic):
                rng = self.rng(dtype, head_dim, mask, deterministic)
                seqlen_q = rng.randint(150, 300)
                if mask == "causal":
                    # More queries than keys: the first Sq - Sk rows see no key.
                    seqlen_k = seqlen_q - rng.randint(5, 60)
                    visible = causal_visible(seqlen_q, seqlen_k, "cuda")
                    arguments = dict(mask="causal")
                else:
                    seqlen_k = seqlen_q
                    visible, indices = documents(rng, seqlen_q, "cuda")
                    visible = visible.expand(2, -1, -1)
                    arguments = dict(mask="flashmask", causal=True,
                                     startend_row_indices=indices.expand(2, -1, -1, -1)
                                     .contiguous())
                q = self.randn(rng, dtype, 2, seqlen_q, HEADS, head_dim)
                k = self.randn(rng, dtype, 2, seqlen_k, KV_HEADS, head_dim)
                v = self.randn(rng, dtype, 2, seqlen_k, KV_HEADS, head_dim)
                d_o = self.randn(rng, dtype, 2, seqlen_q, HEADS, head_dim)
                sinks = sink_logits(rng, HEADS, "cuda")
                got = self.run_attention(q, k, v, sinks, d_o, deterministic, **arguments)
                self.compare(got, (q, k, v), sinks, d_o, visible, dtype, 1 / math.sqrt(head_dim))
                # [B, Sq]: rows that see no key (a causal mask's `visible` is one batch row)
                blind = (~visible.any(dim=-1)).expand(q.shape[0], -1)
                if mask == "causal":
                    self.assertTrue(bool(blind.any()))
                    o, lse = got[0], got[1]
                    self.assertTrue(bool((o[blind] == 0).all()), f"o of blind rows (seed {SEED})")
                    expected = sinks.view(1, HEADS, 1).expand_as(lse)
                    rows = blind[:, None, :].expand_as(lse)
                    torch.testing.assert_close(lse[rows], expected[rows], rtol=0, atol=1e-5)

    def test_sink_far_above_the_scores(self):
        rng = self.rng()
        q, d_o = (self.randn(rng, "bfloat16", 1, 200, HEADS, 64) for _ in range(2))
        k, v = (self.randn(rng, "bfloat16", 1, 200, KV_HEADS, 64) for _ in range(2))
        sinks = sink_logits(rng, HEADS, "cuda", far=100.0)
        got = self.run_attention(q, k, v, sinks, d_o, mask="causal")
        for name, tensor in zip(("o", "lse", "dq", "dk", "dv", "d_sinks"), got):
            self.assertTrue(bool(torch.isfinite(tensor).all()), f"{name} (seed {SEED})")
        lse = got[1]
        torch.testing.assert_close(lse[:, 0], torch.full_like(lse[:, 0], 100.0))
        self.assertLess(got[0][:, :, 0].abs().max().item(), 1e-30)
        self.compare(got, (q, k, v), sinks, d_o, causal_visible(200, 200, "cuda"), "bfloat16",
                     1 / 8)

    def test_sinks_gradient_is_bitwise_repeatable(self):
        rng = self.rng()
        q, d_o = (self.randn(rng, "float16", 2, 333, HEADS, 128) for _ in range(2))
        k, v = (self.randn(rng, "float16", 2, 333, KV_HEADS, 128) for _ in range(2))
        sinks = sink_logits(rng, HEADS, "cuda")
        for deterministic in (False, True):
            first = self.run_attention(q, k, v, sinks, d_o, deterministic, mask="causal")
            second = self.run_attention(q, k, v, sinks, d_o, deterministic, mask="causal")
            self.assertTrue(torch.equal(first[-1], second[-1]), "d_sinks differs between runs")
            if deterministic:
                for name, a, b in zip(("o", "lse", "dq", "dk", "dv"), first, second):
                    self.assertTrue(torch.equal(a, b), f"{name} differs between runs")

    def test_forward_and_sinks_without_gradient(self):
        rng = self.rng()
        q = self.randn(rng, "bfloat16", 1, 130, HEADS, 64).requires_grad_()
        k, v = (self.randn(rng, "bfloat16", 1, 130, KV_HEADS, 64) for _ in range(2))
        sinks = sink_logits(rng, HEADS, "cuda")
        o = attnjit.attention(q, k, v, mask="causal", sinks=sinks)
        o.sum().backward()
        self.assertIsNone(sinks.grad)
        self.assertIsNotNone(q.grad)
        forward, lse = attnjit.forward(q.detach(), k, v, mask="causal", sinks=sinks,
                                       return_lse=True)
        self.assertTrue(torch.equal(forward, o.detach()))
        plain = attnjit.forward(q.detach(), k, v, mask="causal")
        self.assertFalse(torch.equal(forward, plain))

    def test_bad_sinks_name_the_argument(self):
        rng = self.rng()
        q = self.randn(rng, "bfloat16", 1, 64, HEADS, 64)
        k = v = self.randn(rng, "bfloat16", 1, 64, KV_HEADS, 64)
        sinks = sink_logits(rng, HEADS, "cuda")
        for bad, error, message in (
                (sinks.half(), TypeError, "sinks: dtype torch.float16; accepted: torch.float32"),
                (sinks[:-1], attnjit.AttnjitError, r"sinks: shape \(7,\); accepted: \[H=8\]"),
                (sinks.cpu(), attnjit.AttnjitError, "sinks: on device cpu"),
                (torch.zeros(16, device="cuda")[::2], attnjit.AttnjitError,
                 "sinks: not contiguous")):
            with self.subTest(message=message):
                with self.assertRaisesRegex(error, message):
                    attnjit.attention(q, k, v, mask="causal", sinks=bad)


@unittest.skipUnless(HAS_CUDA, "needs PyTorch and a CUDA device")
class VarlenSinksTest(SinksCase):
    def test_packed_batch_equals_the_reference_per_sequence(self):
        for dtype, deterministic in itertools.product(DTYPES, (False, True)):
            with self.subTest(dtype=dtype, deterministic=deterministic):
                rng = self.rng(dtype, deterministic)
                seq_q = [rng.randint(1, 200), 0, 1, rng.randint(50, 250)]
                seq_k = [rng.randint(1, 200), rng.randint(1, 30), 0, rng.randint(50, 250)]
                cu_q = [0] + list(itertools.accumulate(seq_q))
                cu_k = [0] + list(itertools.accumulate(seq_k))
                q = self.randn(rng, dtype, cu_q[-1], HEADS, 128)
                d_o = self.randn(rng, dtype, cu_q[-1], HEADS, 128)
                k = self.randn(rng, dtype, cu_k[-1], KV_HEADS, 128)
                v = self.randn(rng, dtype, cu_k[-1], KV_HEADS, 128)
                sinks = sink_logits(rng, HEADS, "cuda")
                leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
                sink_leaf = sinks.clone().requires_grad_()
                boundaries = [torch.tensor(cu, dtype=torch.int32, device="cuda")
                              for cu in (cu_q, cu_k)]
                o, lse = attnjit.attention_varlen(*leaves, *boundaries, max(seq_q), max(seq_k),
                                                  causal=True, deterministic=deterministic,
                                                  return_lse=True, sinks=sink_leaf)
                o.backward(d_o)
                got = [o.detach(), lse] + [t.grad for t in leaves] + [sink_leaf.grad]
                refs = {}
                for precision in (torch.float64, getattr(torch, dtype)):
                    parts = [t.detach().to(precision).requires_grad_() for t in (q, k, v)]
                    ref_sinks = sinks.clone().requires_grad_()
                    outs, lses = [], []
                    for s in range(len(seq_q)):
                        qs = parts[0][cu_q[s]:cu_q[s + 1]][None]
                        ks = parts[1][cu_k[s]:cu_k[s + 1]][None]
                        vs = parts[2][cu_k[s]:cu_k[s + 1]][None]
                        visible = causal_visible(seq_q[s], seq_k[s], "cuda")
                        out, row_lse = sink_attention(qs, ks, vs, ref_sinks, visible,
                                                      1 / math.sqrt(128))
                        outs.append(out[0])
                        lses.append(row_lse[0])
                    out = torch.cat(outs)
                    out.backward(d_o.to(precision))
                    refs[precision] = ([out.detach(), torch.cat(lses, dim=1).detach()]
                                       + [t.grad for t in parts] + [ref_sinks.grad])
                for name, a, r, low in zip(("o", "lse", "dq", "dk", "dv", "d_sinks"), got,
                                           refs[torch.float64], refs[getattr(torch, dtype)]):
                    self.assertEqual(tuple(a.shape), tuple(r.shape), name)
                    self.assert_close(name, a, r, low)
                # The query of the sequence without keys: o = 0, lse = the sink.
                row = cu_q[2]
                self.assertTrue(bool((o[row] == 0).all()))
                torch.testing.assert_close(lse[:, row], sinks, rtol=0, atol=1e-5)


@unittest.skipUnless(HAS_OPS, "needs PyTorch 2.4+ (torch.library.custom_op) and a CUDA device")
class CompiledSinksTest(SinksCase):
    def setUp(self):
        torch._dynamo.reset()

    def test_compile_fullgraph_equals_eager(self):
        rng = self.rng()
        q, d_o = (self.randn(rng, "bfloat16", 2, 190, HEADS, 64) for _ in range(2))
        k, v = (self.randn(rng, "bfloat16", 2, 170, KV_HEADS, 64) for _ in range(2))
        sinks = sink_logits(rng, HEADS, "cuda")
        cu = torch.tensor([0, 190, 380], dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0, 170, 340], dtype=torch.int32, device="cuda")

        def padded(q, k, v, sinks):
            o, lse = attnjit.attention(q, k, v, mask="causal", deterministic=True,
                                       return_lse=True, sinks=sinks)
            return o * 2, lse

        def packed(q, k, v, sinks):
            o, lse = attnjit.attention_varlen(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1),
                                              cu, cu_k, 190, 170, causal=True, deterministic=True,
                                              return_lse=True, sinks=sinks)
            return o.view(2, 190, HEADS, 64) * 2, lse

        def run(function):
            leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, sinks)]
            o, lse = function(*leaves)
            o.backward(d_o)
            return [o.detach(), lse] + [t.grad for t in leaves]

        for name, f in (("attention", padded), ("attention_varlen", packed)):
            with self.subTest(function=name):
                eager = run(f)
                compiled = run(torch.compile(f, fullgraph=True))
                for label, a, b in zip(("o", "lse", "dq", "dk", "dv", "d_sinks"), compiled,
                                       eager):
                    self.assertTrue(torch.equal(a, b), f"{label}: compiled differs from eager")
                explanation = torch._dynamo.explain(f)(q, k, v, sinks)
                self.assertEqual(explanation.graph_break_count, 0, explanation.break_reasons)


if __name__ == "__main__":
    unittest.main()
