"""attnjit.attention's forward and backward on a CUDA device, against plain torch attention.

Skipped unless PyTorch and a CUDA device are available. Each case compares o, dq, dk and dv
(loss = (o * dO).sum() with a random dO) with an fp32 reference built from ordinary torch ops
on upcast inputs and a dense boolean mask derived from the same semantics (causal bottom-right
aligned; FlashMask rows [LTS, LTE) and [UTS, UTE) masked per key column; soft-capping and ALiBi
applied to the scores before the mask), using
FlashAttention's criterion: max|attnjit - ref| <= 2 * max|torch_lowp - ref| + 1e-3 * max|ref|,
where torch_lowp is the same torch computation in bf16/fp16.

Run: python3 -m unittest discover -s tools/python/tests (ATTNJIT_LIBRARY may name the library).
"""

import itertools
import math
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402

from torch_cuda import HAS_CUDA, torch  # noqa: E402
DTYPES = ("bfloat16", "float16")
HEAD_DIMS = (64, 128)
# (name, mask, causal): the families the test covers; document masks carry FlashMask vectors.
MASKS = (
    ("none", "none", False),
    ("causal", "causal", False),
    ("sliding_window", "sliding_window", False),
    ("causal_document", "flashmask", True),
    ("document", "flashmask", False),
)
WINDOWS = ((64, 0), (32, 16))


def document_bounds(seqlen, count, generator):
    """Start and end [seqlen] of the document holding each position: `count` documents of
    random lengths covering [0, seqlen)."""
    cuts = torch.randperm(seqlen - 1, generator=generator)[:count - 1] + 1
    ends = torch.cat([cuts.sort().values, torch.tensor([seqlen])])
    starts = torch.cat([torch.tensor([0]), ends[:-1]])
    document = torch.searchsorted(ends, torch.arange(seqlen), right=True)
    return starts[document], ends[document]


def document_vectors(batch, seqlen, causal, generator):
    """startend_row_indices int32 [B, 1, S, C]: causal document (C = 1, LTS = document end) or
    document (C = 2, LTS = document end, UTE = document start)."""
    columns = []
    for _ in range(batch):
        count = int(torch.randint(2, 6, (), generator=generator))
        start, end = document_bounds(seqlen, count, generator)
        columns.append(end[:, None] if causal else torch.stack([end, start], dim=1))
    return torch.stack(columns)[:, None].to(torch.int32)


def visible_mask(mask, causal, seqlen_q, seqlen_k, window, indices, device):
    """Dense bool [B or 1, Hm or 1, Sq, Sk]: True where query row i sees key column j."""
    rows = torch.arange(seqlen_q, device=device)[:, None]
    cols = torch.arange(seqlen_k, device=device)[None, :]
    offset = seqlen_k - seqlen_q
    visible = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if mask == "causal" or (mask == "flashmask" and causal):
        visible &= cols <= rows + offset
    if mask == "sliding_window":
        left, right = window
        if left >= 0:
            visible &= cols >= rows + offset - left
        if right >= 0:
            visible &= cols <= rows + offset + right
    visible = visible[None, None]
    if mask == "flashmask":
        vectors = indices.to(device=device, dtype=torch.int64)
        rows = rows[None, None]
        column = [vectors[..., c][:, :, None, :] for c in range(vectors.shape[-1])]
        if vectors.shape[-1] == 1:
            masked = rows >= column[0]
        elif causal:
            masked = (rows >= column[0]) & (rows < column[1])
        elif vectors.shape[-1] == 2:
            masked = (rows >= column[0]) | (rows < column[1])
        else:
            masked = ((rows >= column[0]) & (rows < column[1])) | \
                ((rows >= column[2]) & (rows < column[3]))
        visible = visible & ~masked
    return visible


def torch_attention(q, k, v, visible, scale, softcap=None, slopes=None):
    """(o, lse, P): softmax(m(q k^T * scale), masked) v with plain torch ops in q's dtype,
    [B, S, H, D], its log-sum-exp [B, H, Sq] and the probabilities P [B, H, Sq, Sk].
    m: s <- softcap * tanh(s / softcap), then s <- s + slopes[h] * (j - (i + Sk - Sq))."""
    heads, kv_heads = q.shape[2], k.shape[2]
    k = k.repeat_interleave(heads // kv_heads, dim=2)
    v = v.repeat_interleave(heads // kv_heads, dim=2)
    visible = visible.repeat_interleave(heads // visible.shape[1], dim=1)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if slopes is not None:
        seqlen_q, seqlen_k = scores.shape[-2], scores.shape[-1]
        rows = torch.arange(seqlen_q, device=q.device)[:, None]
        cols = torch.arange(seqlen_k, device=q.device)[None, :]
        distance = (cols - rows - (seqlen_k - seqlen_q)).to(scores.dtype)
        scores = scores + slopes.to(scores.dtype)[None, :, None, None] * distance
    scores = scores.masked_fill(~visible, float("-inf"))
    # Rows without a visible key give 0, as attnjit does (softmax alone gives NaN there).
    probabilities = torch.softmax(scores, dim=-1).masked_fill(~visible, 0.0)
    lse = torch.logsumexp(scores.float(), dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", probabilities, v), lse, probabilities


def random_inputs(generator, device, dtype, batch, seqlen_q, seqlen_k, heads, kv_heads,
                  head_dim, head_dim_v=None):
    """q, k [B, S, H, D], v and dO [B, S, H, Dv] (Dv = D unless head_dim_v is given) of standard
    normal values drawn from `generator` (in that order) and rounded to `dtype` on `device`."""
    head_dim_v = head_dim if head_dim_v is None else head_dim_v

    def randn(*shape):
        return torch.randn(shape, generator=generator).to(device=device, dtype=dtype)

    return (randn(batch, seqlen_q, heads, head_dim), randn(batch, seqlen_k, kv_heads, head_dim),
            randn(batch, seqlen_k, kv_heads, head_dim_v),
            randn(batch, seqlen_q, heads, head_dim_v))


def with_grads(function, q, k, v, d_o):
    """function(q, k, v)'s output and (dq, dk, dv) from loss = (o * d_o).sum()."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o = function(*leaves)
    o.backward(d_o)
    return [o.detach()] + [t.grad for t in leaves]


class AutogradTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not HAS_CUDA:
            raise unittest.SkipTest("needs PyTorch and a CUDA device")

    def assert_flash_attention_close(self, name, out, ref, lowp):
        """FlashAttention's test criterion against the fp32 reference."""
        ref = ref.float()
        error = (out.float() - ref).abs().max().item()
        lowp_error = (lowp.float() - ref).abs().max().item()
        limit = 2 * lowp_error + 1e-3 * ref.abs().max().item()
        self.assertFalse(math.isnan(error), f"{name}: NaN")
        self.assertLessEqual(error, limit, f"{name}: max error {error:.3e}, torch low precision "
                             f"{lowp_error:.3e}, limit {limit:.3e}")

    def check(self, dtype, head_dim, mask_name, seqlen_q, seqlen_k, heads, kv_heads,
              window=(-1, 0), deterministic=False, seed=0, softcap=None, slopes=None,
              head_dim_v=None):
        _, mask, causal = dict((m[0], m) for m in MASKS)[mask_name]
        generator = torch.Generator().manual_seed(seed)
        device = torch.device("cuda")
        dtype = getattr(torch, dtype)
        batch = 2

        q, k, v, d_o = random_inputs(generator, device, dtype, batch, seqlen_q, seqlen_k, heads,
                                     kv_heads, head_dim, head_dim_v)
        indices = None
        if mask == "flashmask":
            indices = document_vectors(batch, seqlen_k, causal, generator).to(device)
        scale = 1 / math.sqrt(head_dim)
        visible = visible_mask(mask, causal, seqlen_q, seqlen_k, window, indices, device)

        returned = {}
        if slopes is not None:
            slopes = slopes.to(device)

        def run_attnjit(q_, k_, v_):
            o, returned["lse"] = attnjit.attention(q_, k_, v_, mask=mask, causal=causal,
                                                   startend_row_indices=indices, window=window,
                                                   return_lse=True, deterministic=deterministic,
                                                   softcap=softcap, alibi_slopes=slopes)
            return o

        def run_torch(q_, k_, v_):
            return torch_attention(q_, k_, v_, visible, scale, softcap, slopes)[0]

        got = with_grads(run_attnjit, q, k, v, d_o)
        ref = with_grads(run_torch, q.float(), k.float(), v.float(), d_o.float())
        lowp = with_grads(run_torch, q, k, v, d_o)
        for name, out, r, low in zip(("o", "dq", "dk", "dv"), got, ref, lowp):
            self.assertEqual(out.dtype, dtype, name)
            self.assertEqual(out.shape, r.shape, name)
            self.assert_flash_attention_close(name, out, r, low)

        lse = returned["lse"]
        self.assertFalse(lse.requires_grad)
        self.assertEqual(lse.dtype, torch.float32)
        ref_lse = torch_attention(q.float(), k.float(), v.float(), visible, scale, softcap,
                                  slopes)[1]
        lowp_lse = torch_attention(q, k, v, visible, scale, softcap, slopes)[1]
        # Rows without a visible key have LSE = -inf (compared apart: -inf - -inf is NaN).
        finite = torch.isfinite(ref_lse)
        self.assertTrue(torch.all(lse[~finite] == float("-inf")), "lse of empty rows")
        self.assert_flash_attention_close("lse", lse[finite], ref_lse[finite], lowp_lse[finite])
        return got

    def test_masks_head_dims_dtypes(self):
        for dtype, head_dim, (mask_name, _, _) in itertools.product(DTYPES, HEAD_DIMS, MASKS):
            windows = WINDOWS if mask_name == "sliding_window" else ((-1, 0),)
            for window, (heads, kv_heads) in itertools.product(windows, ((4, 4), (4, 2))):
                with self.subTest(dtype=dtype, head_dim=head_dim, mask=mask_name, window=window,
                                  heads=heads, kv_heads=kv_heads):
                    self.check(dtype, head_dim, mask_name, 333, 333, heads, kv_heads, window)

    def test_unequal_lengths(self):
        # Sk > Sq shifts the causal diagonal right; Sq > Sk leaves the first rows with no
        # visible key (o = 0, no gradient through them).
        for dtype, head_dim, mask_name, (seqlen_q, seqlen_k) in itertools.product(
                DTYPES, HEAD_DIMS, ("none", "causal"), ((200, 300), (300, 200))):
            with self.subTest(dtype=dtype, head_dim=head_dim, mask=mask_name, seqlen_q=seqlen_q,
                              seqlen_k=seqlen_k):
                self.check(dtype, head_dim, mask_name, seqlen_q, seqlen_k, 4, 2)

    def test_score_modifiers(self):
        # Soft-capping at 1.5 bends most N(0, 1) scores; the standard ALiBi slopes, and
        # negative ones, over GQA, unequal lengths and both dQ modes.
        slopes = torch.tensor([2.0 ** (-8 * i / 4) for i in range(1, 5)])
        modifiers = (("softcap", 1.5, None), ("alibi", None, slopes),
                     ("both", 5.0, slopes), ("negative alibi", None, -slopes))
        # Five length pairs against the modifiers' four: each modifier meets each pair.
        lengths = ((333, 333), (200, 300), (300, 200), (130, 129), (65, 257))
        for index, (dtype, head_dim, mask_name, (name, softcap, alibi), deterministic) in \
                enumerate(itertools.product(DTYPES, HEAD_DIMS,
                                            ("none", "causal", "causal_document"), modifiers,
                                            (False, True))):
            seqlen_q, seqlen_k = lengths[index // 2 % 5] if mask_name != "causal_document" \
                else (333, 333)
            with self.subTest(dtype=dtype, head_dim=head_dim, mask=mask_name, modifier=name,
                              seqlen_q=seqlen_q, seqlen_k=seqlen_k, deterministic=deterministic):
                self.check(dtype, head_dim, mask_name, seqlen_q, seqlen_k, 4, 2,
                           deterministic=deterministic, seed=index, softcap=softcap,
                           slopes=alibi)

    def test_unequal_head_dims(self):
        # MLA prefill's head_dim_qk 192 with head_dim_v 128 (v and o narrower than q and k):
        # the default scale stays 1/sqrt(head_dim_qk), dv and o take v's width.
        for index, (dtype, mask_name, deterministic) in enumerate(itertools.product(
                DTYPES, ("causal", "causal_document"), (False, True))):
            with self.subTest(dtype=dtype, mask=mask_name, deterministic=deterministic):
                got = self.check(dtype, 192, mask_name, 333, 333, 4, 2,
                                 deterministic=deterministic, seed=index, head_dim_v=128)
                self.assertEqual(got[0].shape[-1], 128)
                self.assertEqual(got[3].shape[-1], 128)

    def test_deterministic_gradients_are_bitwise_identical(self):
        for mask_name, dtype in itertools.product(("none", "causal_document"), DTYPES):
            with self.subTest(mask=mask_name, dtype=dtype):
                first = self.check(dtype, 128, mask_name, 333, 333, 4, 2, deterministic=True)
                second = self.check(dtype, 128, mask_name, 333, 333, 4, 2, deterministic=True)
                for name, a, b in zip(("o", "dq", "dk", "dv"), first, second):
                    self.assertTrue(torch.equal(a, b), f"{name} differs between two runs")

    def test_predicate_masks(self):
        # attnjit.predicate against the dense mask of the same rule, written with torch ops
        # (all operands >= 0, so // and % agree with the predicate's truncating division).
        batch, seqlen, heads, kv_heads = 2, 300, 4, 2
        device = torch.device("cuda")
        rows = torch.arange(seqlen, device=device)[:, None]
        cols = torch.arange(seqlen, device=device)[None, :]
        generator = torch.Generator().manual_seed(3)
        segment = torch.randint(0, 4, (batch, seqlen), generator=generator).sort(dim=1).values
        segment = segment.to(device=device, dtype=torch.int32)
        head = torch.arange(heads, device=device)[:, None, None]
        cases = (
            ("((q / 128 + k / 128) % 2 == 0) && (q + k) % 3 != 0", {},
             (((rows // 128 + cols // 128) % 2 == 0) & ((rows + cols) % 3 != 0))[None, None]),
            ("(k + h) % 3 != 0 && k <= q", {},
             (((cols + head) % 3 != 0) & (cols <= rows))[None]),
            ("seg[q] == seg[k] && q % 5 != 2", {"seg": segment},
             ((segment[:, :, None] == segment[:, None, :]) & (rows % 5 != 2))[:, None]),
        )
        # Score modifiers with predicates: none, soft-capping, ALiBi, both (rotating).
        slopes = torch.tensor([2.0 ** (-8 * i / heads) for i in range(1, heads + 1)],
                              device=device)
        modifiers = ((None, None), (1.5, None), (None, slopes), (5.0, -slopes))
        for index, ((expression, tensors, visible), dtype, deterministic) in enumerate(
                itertools.product(cases, DTYPES, (False, True))):
            softcap, alibi = modifiers[index % len(modifiers)]
            with self.subTest(expression=expression, dtype=dtype, deterministic=deterministic,
                              softcap=softcap, alibi=alibi is not None):
                dtype_ = getattr(torch, dtype)

                def randn(*shape):
                    return torch.randn(shape, generator=generator).to(device=device, dtype=dtype_)

                q, d_o = randn(batch, seqlen, heads, 64), randn(batch, seqlen, heads, 64)
                k, v = randn(batch, seqlen, kv_heads, 64), randn(batch, seqlen, kv_heads, 64)
                mask = attnjit.predicate(expression, tensors)
                got = with_grads(lambda q_, k_, v_: attnjit.attention(
                    q_, k_, v_, mask=mask, deterministic=deterministic, softcap=softcap,
                    alibi_slopes=alibi), q, k, v, d_o)

                def run_torch(q_, k_, v_):
                    return torch_attention(q_, k_, v_, visible, 1 / 8, softcap, alibi)[0]

                ref = with_grads(run_torch, q.float(), k.float(), v.float(), d_o.float())
                lowp = with_grads(run_torch, q, k, v, d_o)
                for name, out, r, low in zip(("o", "dq", "dk", "dv"), got, ref, lowp):
                    self.assert_flash_attention_close(name, out, r, low)

    def test_gradient_layouts_and_partial_requirements(self):
        q, k, v = (torch.randn(1, 130, 2, 64, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        visible = visible_mask("causal", False, 130, 130, (-1, 0), None, "cuda")
        # o.sum() hands backward an expanded (stride 0) gradient.
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        attnjit.attention(*leaves, causal=True).sum().backward()
        ref = [t.float().requires_grad_() for t in (q, k, v)]
        torch_attention(*ref, visible, 1 / 8)[0].sum().backward()
        lowp = [t.clone().requires_grad_() for t in (q, k, v)]
        torch_attention(*lowp, visible, 1 / 8)[0].sum().backward()
        for name, a, r, low in zip(("dq", "dk", "dv"), leaves, ref, lowp):
            self.assert_flash_attention_close(name, a.grad, r.grad, low.grad)
        # Only q requires a gradient; k and v get none.
        q_only = q.clone().requires_grad_()
        attnjit.attention(q_only, k, v, mask="causal").sum().backward()
        self.assertIsNotNone(q_only.grad)
        self.assertIsNone(k.grad)
        self.assertIsNone(v.grad)
        # lse is returned but not differentiable; o without return_lse is a single tensor.
        o, lse = attnjit.attention(q_only, k, v, return_lse=True)
        self.assertTrue(o.requires_grad)
        self.assertFalse(lse.requires_grad)
        self.assertEqual(lse.dtype, torch.float32)
        self.assertEqual(tuple(lse.shape), (1, 2, 130))


if __name__ == "__main__":
    unittest.main()
