"""attnjit.attention_varlen on a CUDA device, against a float64 reference computed sequence by
sequence from slices of the packed tensors.

Skipped unless PyTorch and a CUDA device are available. Each case packs ragged sequences (random
lengths that are not tile multiples, an empty query sequence, a length-1 one, a sequence with no
keys, Sq != Sk per sequence) and compares o, lse, dq, dk and dv (loss = (o * dO).sum()) with the
reference: per sequence s, scores of its local queries i and keys j (the first seqused_k[s] of
them, Sk_s of them after it) masked in local positions, off = Sk_s - Sq_s: causal keeps
j <= i + off, a window (left, right) keeps i + off - left <= j <= i + off + right, FlashMask
vectors (random, drawn on the host per sequence and mask head, every arity) hide the rows of
their intervals, element predicates (attnjit.predicate, seeing the sequence index b and local
q, k; their tensors per sequence or shared) hide the pairs where their rule, written again
with torch ops, is false, and ALiBi (shared boundaries) adds slope[h] * (j - i - off). The
criterion is FlashAttention's, as test_autograd_gpu.py uses it: max|attnjit - ref| <=
2 * max|lowp - ref| + 1e-3 * max|ref|, lowp the same computation in bf16/fp16. Rows that see no
key must give o = 0, lse = -inf (as the padded path does) and no gradient.

The data are fresh on every run; the seed is printed, and ATTNJIT_TEST_SEED=<number> repeats a
run. Also: deterministic=True gradients are bitwise repeatable, torch.compile(fullgraph=True)
of a function calling attention_varlen equals eager, and a CUDA graph captured once replays
correctly with new cu_seqlens values of the same shapes (with and without a predicate mask).

Run: ATTNJIT_LIBRARY=build/libattnjit.so python3 -m unittest discover -s tools/python/tests \
         -p test_varlen_gpu.py -v
"""

import itertools
import math
import random
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402
from attnjit import _launch  # noqa: E402
from cache_dir import TemporaryCacheTest  # noqa: E402
from torch_cuda import HAS_CUDA, run_seed, torch  # noqa: E402

HAS_OPS = HAS_CUDA and attnjit._ops is not None
DTYPES = ("bfloat16", "float16")
HEAD_DIMS = (64, 128)
# (name, causal, window_size) in FlashAttention's terms.
MASKS = (("none", False, (-1, -1)), ("causal", True, (-1, -1)),
         ("window", False, (48, 17)), ("causal window", True, (70, -1)))
HEADS, KV_HEADS = 8, 2
SEED = run_seed()


def not_a_tile_multiple(length):
    return length + 1 if length % 16 == 0 and length > 0 else length


def draw_lengths(rng):
    """(query lengths, key lengths) of 7 sequences: an empty query sequence, a length-1 one, a
    sequence without keys, and four ragged ones (Sq and Sk drawn apart)."""
    ragged = [not_a_tile_multiple(rng.randint(2, 300)) for _ in range(8)]
    seq_q = [ragged[0], 0, 1, rng.randint(1, 90), ragged[1], ragged[2], ragged[3]]
    seq_k = [ragged[4], rng.randint(1, 50), ragged[5], 0, ragged[6], ragged[7],
             not_a_tile_multiple(rng.randint(2, 40))]
    return seq_q, seq_k


def offsets(lengths):
    out = [0]
    for length in lengths:
        out.append(out[-1] + length)
    return out


def packed_attention(q, k, v, cu_q, cu_k, used, causal, window, scale, softcap=None,
                     vectors=None, slopes=None):
    """(o [total_q, H, Dv], lse [H, total_q]) of a packed batch in q's dtype, one sequence at a
    time from host lists cu_q, cu_k and used (keys used per sequence); differentiable. Rows
    without a visible key give o = 0 and lse = -inf (no NaN, in values or gradients).
    `vectors` (a Vectors) hides more rows of each key, `slopes` (fp32 [H]) adds ALiBi's
    slope[h] * (j - (i + Sk_s - Sq_s))."""
    heads, kv_heads = q.shape[1], k.shape[1]
    outputs, lses = [], []
    for s in range(len(cu_q) - 1):
        qs = q[cu_q[s]:cu_q[s + 1]]
        ks = k[cu_k[s]:cu_k[s] + used[s]].repeat_interleave(heads // kv_heads, dim=1)
        vs = v[cu_k[s]:cu_k[s] + used[s]].repeat_interleave(heads // kv_heads, dim=1)
        seqlen_q, seqlen_k = qs.shape[0], ks.shape[0]
        scores = torch.einsum("qhd,khd->hqk", qs, ks) * scale
        if softcap is not None:
            scores = softcap * torch.tanh(scores / softcap)
        rows = torch.arange(seqlen_q, device=q.device)[:, None]
        cols = torch.arange(seqlen_k, device=q.device)[None, :]
        diagonal = rows + seqlen_k - seqlen_q
        if slopes is not None:
            scores = scores + slopes.to(scores.dtype)[:, None, None] * (cols - diagonal)
        left, right = window
        if causal:
            right = 0
        visible = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=q.device)
        if left >= 0:
            visible &= cols >= diagonal - left
        if right >= 0:
            visible &= cols <= diagonal + right
        if vectors is not None:
            hidden = vectors.hidden(s, seqlen_q, seqlen_k, q.device)
            visible = visible & ~hidden.repeat_interleave(heads // hidden.shape[0], dim=0)
        scores = scores.masked_fill(~visible, float("-inf"))
        if seqlen_k == 0:
            peak = torch.zeros(heads, seqlen_q, 1, dtype=scores.dtype, device=q.device)
        else:
            peak = scores.detach().amax(dim=-1, keepdim=True)
        peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
        weights = torch.exp(scores - peak)
        total = weights.sum(dim=-1, keepdim=True)
        probabilities = weights / torch.where(total > 0, total, torch.ones_like(total))
        outputs.append(torch.einsum("hqk,khd->qhd", probabilities, vs))
        # The LSE in at least fp32, as the kernels keep it.
        wide = torch.promote_types(scores.dtype, torch.float32)
        lses.append((torch.log(total.to(wide)) + peak.to(wide))[..., 0])
    return torch.cat(outputs), torch.cat(lses, dim=1)


ARITIES = ((True, 1), (True, 2), (False, 2), (False, 4))  # (causal, columns) of FlashMask


class Vectors:
    """Random FlashMask vectors of a packed batch, drawn on the host: for every sequence, mask
    head and key, C values local to the sequence's rows (0..Sq_s, sometimes past it, which
    reads as Sq_s), each interval's start <= its end; and their tensor [1, Hm, total_k, C]."""

    def __init__(self, rng, causal, columns, mask_heads, seq_q, seq_k, device):
        self.causal, self.columns = causal, columns
        self.values = []  # per sequence: [Hm][Sk_s][C]
        for queries, keys in zip(seq_q, seq_k):
            self.values.append([[self.draw(rng, queries) for _ in range(keys)]
                                for _ in range(mask_heads)])
        packed = [[row for sequence in self.values for row in sequence[h]]
                  for h in range(mask_heads)]
        self.tensor = torch.tensor(packed, dtype=torch.int32).reshape(
            1, mask_heads, sum(seq_k), columns).to(device)

    def draw(self, rng, queries):
        def row():  # a local row: often the end (hides nothing), sometimes past it
            return queries if rng.random() < 0.2 else rng.randint(0, queries + 2)

        first, second = sorted((row(), row()))
        if self.columns == 1:
            return [first]
        if self.columns == 2 and self.causal:
            return [first, second]  # LTS, LTE
        if self.columns == 2:
            return [second, first]  # LTS, UTE: rows [UTE, LTS) visible
        upper = sorted((row(), row()))
        return [first, second] + upper  # LTS, LTE, UTS, UTE

    def hidden(self, s, seqlen_q, seqlen_k, device):
        """Bool [Hm, Sq_s, Sk] of sequence s: the (row, key) pairs the vectors hide, for its
        first seqlen_k keys."""
        heads, keys = len(self.values[s]), len(self.values[s][0])
        values = torch.tensor(self.values[s], dtype=torch.int64).reshape(
            heads, keys, self.columns)[:, :seqlen_k].to(device)
        rows = torch.arange(seqlen_q, device=device)[None, :, None]
        column = [values[:, None, :, c] for c in range(self.columns)]
        if self.columns == 1:
            return rows >= column[0]
        if self.columns == 2 and self.causal:
            return (rows >= column[0]) & (rows < column[1])
        if self.columns == 2:
            return (rows >= column[0]) | (rows < column[1])
        return (((rows >= column[0]) & (rows < column[1]))
                | ((rows >= column[2]) & (rows < column[3])))


class Predicate:
    """An element predicate mask of a packed batch and its rule written with torch ops:
    `rule(s, rows, cols)` gives the visible pairs of sequence s, bool [1 or H, Sq_s, Sk], from
    its local rows [Sq_s, 1] and keys [1, Sk] (int64, on the device)."""

    def __init__(self, name, expression, tensors, rule):
        self.name = name
        self.mask = attnjit.predicate(expression, tensors=tensors)
        self.rule = rule

    def hidden(self, s, seqlen_q, seqlen_k, device):
        """Bool [1 or H, Sq_s, Sk]: the pairs the predicate hides, as Vectors.hidden gives
        them."""
        rows = torch.arange(seqlen_q, device=device)[:, None]
        cols = torch.arange(seqlen_k, device=device)[None, :]
        return ~self.rule(s, rows, cols)


def predicates(rng, problem, width=None):
    """The predicates of the tests, their tensors drawn for `problem`: one that reads b through
    a tensor shared by the sequences ([B]: lim[b] is sequence b's limit), one that reads a
    tensor of one row per sequence ([B, width], local segment ids) and a bottom-right causal
    diagonal written in the predicate, and one of the query head h and literals."""
    device = problem.q.device
    width = width or max(problem.max_seqlen_q, problem.max_seqlen_k, 1)
    lim = [rng.randint(0, n + 1) for n in problem.seq_k]
    seg = [sorted(rng.randint(0, 3) for _ in range(width)) for _ in problem.seq_q]
    off = [keys - queries for queries, keys in zip(problem.seq_q, problem.seq_k)]
    lim_t, seg_t, off_t = (torch.tensor(x, dtype=torch.int32, device=device)
                           for x in (lim, seg, off))
    heads = torch.arange(problem.q.shape[1], device=device)[:, None, None]
    return (
        Predicate("lim[b]", "q >= k && k < lim[b]", {"lim": lim_t},
                  lambda s, rows, cols: ((cols <= rows) & (cols < lim[s]))[None]),
        Predicate("seg per sequence", "seg[q] == seg[k] && k <= q + off[b]",
                  {"seg": seg_t, "off": off_t},
                  lambda s, rows, cols: ((seg_t[s].long()[rows] == seg_t[s].long()[cols])
                                         & (cols <= rows + off[s]))[None]),
        Predicate("heads", "(k + h) % 3 != 0 && q - k < 37", {},
                  lambda s, rows, cols: ((cols + heads) % 3 != 0) & (rows - cols < 37)),
    )


def alibi_slopes(heads, device):
    """ALiBi's geometric slopes 2^(-8 (h + 1) / H), fp32 [H]."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)],
                        dtype=torch.float32, device=device)


class Problem:
    """One packed batch: lengths, boundaries on the host and the device, inputs and dO."""

    def __init__(self, rng, dtype, head_dim, with_seqused, heads=HEADS, kv_heads=KV_HEADS,
                 shared=False, lengths=None):
        self.seq_q, self.seq_k = lengths or draw_lengths(rng)
        self.shared = shared
        if shared:  # self-attention: the keys take the queries' boundaries (one tensor)
            self.seq_k = list(self.seq_q)
        self.cu_q, self.cu_k = offsets(self.seq_q), offsets(self.seq_k)
        self.used = list(self.seq_k)
        if with_seqused:
            self.used = [rng.randint(0, n) for n in self.seq_k]
            self.used[0] = 0  # a sequence with queries whose keys are all unused
        device = torch.device("cuda")
        self.cu_seqlens_q = torch.tensor(self.cu_q, dtype=torch.int32, device=device)
        self.cu_seqlens_k = (self.cu_seqlens_q if shared else
                             torch.tensor(self.cu_k, dtype=torch.int32, device=device))
        self.seqused_k = (torch.tensor(self.used, dtype=torch.int32, device=device)
                          if with_seqused else None)
        generator = torch.Generator().manual_seed(rng.randrange(2**63))
        dtype = getattr(torch, dtype)

        def randn(*shape):
            return torch.randn(shape, generator=generator).to(device=device, dtype=dtype)

        total_q, total_k = self.cu_q[-1], self.cu_k[-1]
        self.q, self.d_o = randn(total_q, heads, head_dim), randn(total_q, heads, head_dim)
        self.k, self.v = randn(total_k, kv_heads, head_dim), randn(total_k, kv_heads, head_dim)
        self.max_seqlen_q, self.max_seqlen_k = max(self.seq_q), max(self.seq_k)

    def attnjit(self, causal, window, softcap=None, deterministic=False, vectors=None,
                slopes=None, mask=None):
        """(o, lse, dq, dk, dv) of attention_varlen; `mask` a Predicate."""
        leaves = [t.detach().clone().requires_grad_() for t in (self.q, self.k, self.v)]
        o, lse = attnjit.attention_varlen(
            *leaves, self.cu_seqlens_q, self.cu_seqlens_k, self.max_seqlen_q, self.max_seqlen_k,
            causal=causal, window_size=window, softcap=softcap, seqused_k=self.seqused_k,
            deterministic=deterministic, return_lse=True, alibi_slopes=slopes,
            startend_row_indices=None if vectors is None else vectors.tensor,
            mask=None if mask is None else mask.mask)
        o.backward(self.d_o)
        return (o.detach(), lse) + tuple(t.grad for t in leaves)

    def reference(self, dtype, causal, window, softcap=None, vectors=None, slopes=None,
                  mask=None):
        """(o, lse, dq, dk, dv) of packed_attention on the inputs cast to `dtype`; a Predicate
        `mask` hides its pairs as vectors hide theirs."""
        leaves = [t.detach().to(dtype).requires_grad_() for t in (self.q, self.k, self.v)]
        scale = 1 / math.sqrt(self.q.shape[-1])
        o, lse = packed_attention(*leaves, self.cu_q, self.cu_k, self.used, causal, window, scale,
                                  softcap, mask or vectors, slopes)
        o.backward(self.d_o.to(dtype))
        return (o.detach(), lse.detach()) + tuple(t.grad for t in leaves)

    def blind_rows(self, causal, window):
        """Bool [total_q]: the query rows that see no key."""
        blind = torch.zeros(self.cu_q[-1], dtype=torch.bool)
        left, right = window
        if causal:
            right = 0
        for s in range(len(self.seq_q)):
            keys = self.used[s]
            for i in range(self.seq_q[s]):
                diagonal = i + keys - self.seq_q[s]
                low = 0 if left < 0 else max(0, diagonal - left)
                high = keys - 1 if right < 0 else min(keys - 1, diagonal + right)
                blind[self.cu_q[s] + i] = low > high
        return blind.to(self.q.device)


def setUpModule():
    if HAS_CUDA:
        print(f"\ntest_varlen_gpu: seed {SEED} (ATTNJIT_TEST_SEED={SEED} repeats this run)",
              flush=True)


@unittest.skipUnless(HAS_CUDA, "needs PyTorch and a CUDA device")
class VarlenTest(TemporaryCacheTest):
    def rng(self, *tags):
        return random.Random(f"{SEED}:{self.id()}:{tags}")

    def assert_close(self, name, out, ref, lowp):
        ref = ref.double()
        error = (out.double() - ref).abs().max().item() if ref.numel() else 0.0
        lowp_error = (lowp.double() - ref).abs().max().item() if ref.numel() else 0.0
        limit = 2 * lowp_error + 1e-3 * (ref.abs().max().item() if ref.numel() else 0.0)
        self.assertFalse(math.isnan(error), f"{name}: NaN (seed {SEED})")
        self.assertLessEqual(error, limit, f"{name}: max error {error:.3e}, low precision "
                             f"{lowp_error:.3e}, limit {limit:.3e} (seed {SEED})")

    def check(self, problem, dtype, causal, window, softcap=None, vectors=None, slopes=None,
              mask=None, deterministic=False):
        extra = dict(vectors=vectors, slopes=slopes, mask=mask)
        got = problem.attnjit(causal, window, softcap, deterministic, **extra)
        ref = problem.reference(torch.float64, causal, window, softcap, **extra)
        lowp = problem.reference(getattr(torch, dtype), causal, window, softcap, **extra)
        o, lse, *grads = got
        self.assertEqual(o.dtype, getattr(torch, dtype))
        self.assertEqual(tuple(o.shape), tuple(problem.q.shape))
        self.assertEqual(lse.dtype, torch.float32)
        self.assertEqual(tuple(lse.shape), (problem.q.shape[1], problem.q.shape[0]))
        self.assertFalse(lse.requires_grad)
        for name, out, r, low in zip(("o", "dq", "dk", "dv"), [o] + grads,
                                     ref[:1] + ref[2:], lowp[:1] + lowp[2:]):
            self.assertEqual(tuple(out.shape), tuple(r.shape), name)
            self.assert_close(name, out, r, low)
        # Rows that see no key (per head: FlashMask vectors and predicates may hide a row from
        # one head only): o = 0 and lse = -inf exactly, and dq = 0.
        blind = torch.isinf(ref[1])  # [H, total_q]
        if vectors is None and mask is None:
            rows = problem.blind_rows(causal, window)
            if not problem.shared:
                self.assertTrue(bool(rows.any()), "the problem has rows that see no key")
            self.assertTrue(torch.equal(blind, rows[None].expand_as(blind)))
        by_row = blind.t()  # [total_q, H], as o and dq index their heads
        self.assertTrue(bool((o[by_row] == 0).all()), f"o of rows that see no key (seed {SEED})")
        self.assertTrue(bool((lse[blind] == float("-inf")).all()),
                        f"lse of rows that see no key (seed {SEED})")
        self.assertTrue(bool((grads[0][by_row] == 0).all()), "dq of rows that see no key")
        seen = ~blind
        self.assert_close("lse", lse[seen], ref[1][seen], lowp[1][seen])
        return got

    def test_masks_dtypes_head_dims(self):
        for dtype, head_dim, (name, causal, window), with_seqused in itertools.product(
                DTYPES, HEAD_DIMS, MASKS, (False, True)):
            with self.subTest(dtype=dtype, head_dim=head_dim, mask=name, seqused_k=with_seqused):
                problem = Problem(self.rng(dtype, head_dim, name, with_seqused), dtype,
                                  head_dim, with_seqused)
                self.check(problem, dtype, causal, window)

    def test_shared_boundaries(self):
        # One tensor for cu_seqlens_q and cu_seqlens_k (self-attention) compiles varlen=shared,
        # whose causal mask runs by index.
        for dtype, (name, causal, window) in itertools.product(DTYPES, MASKS):
            with self.subTest(dtype=dtype, mask=name):
                problem = Problem(self.rng(dtype, name, "shared"), dtype, 128, False,
                                  shared=True)
                self.check(problem, dtype, causal, window)
        self.assertTrue(any("varlen=shared" in text for text in _launch._specs.values()))

    def test_softcap_and_heads(self):
        # Soft-capping (FlashAttention's softcap=0.0 is none) with MQA and equal heads.
        for dtype, (heads, kv_heads), softcap in itertools.product(
                DTYPES, ((8, 1), (4, 4)), (None, 1.5)):
            with self.subTest(dtype=dtype, heads=heads, kv_heads=kv_heads, softcap=softcap):
                problem = Problem(self.rng(dtype, heads, kv_heads, softcap), dtype, 128, True,
                                  heads, kv_heads)
                self.check(problem, dtype, True, (-1, -1), softcap)

    def test_flashmask_inside_sequences(self):
        # Random vectors of every arity per sequence, rows local to it, one mask head or one per
        # KV head; keys on their own boundaries with seqused_k (varlen=true), and shared ones.
        for (causal, columns), mask_heads, shared in itertools.product(
                ARITIES, (1, KV_HEADS), (False, True)):
            dtype = "float16" if mask_heads == KV_HEADS and not shared else "bfloat16"
            with self.subTest(causal=causal, columns=columns, mask_heads=mask_heads,
                              shared=shared, dtype=dtype):
                rng = self.rng(causal, columns, mask_heads, shared)
                problem = Problem(rng, dtype, 128, not shared, shared=shared)
                vectors = Vectors(rng, causal, columns, mask_heads, problem.seq_q,
                                  problem.seq_k, problem.q.device)
                self.check(problem, dtype, causal, (-1, -1), vectors=vectors)

    def test_alibi_with_shared_boundaries(self):
        for dtype, (name, causal, window) in itertools.product(DTYPES, MASKS):
            with self.subTest(dtype=dtype, mask=name):
                problem = Problem(self.rng(dtype, name), dtype, 128, False, shared=True)
                slopes = alibi_slopes(HEADS, problem.q.device)
                self.check(problem, dtype, causal, window, slopes=slopes)
        # With FlashMask vectors and GQA-sized mask heads too.
        rng = self.rng("flashmask")
        problem = Problem(rng, "bfloat16", 64, False, shared=True)
        vectors = Vectors(rng, True, 2, KV_HEADS, problem.seq_q, problem.seq_k, problem.q.device)
        self.check(problem, "bfloat16", True, (-1, -1), vectors=vectors,
                   slopes=alibi_slopes(HEADS, problem.q.device))

    def test_predicate_masks(self):
        # Each predicate in ragged packed batches (GQA 8/2), on the keys' own boundaries with
        # and without seqused_k, rotating softcap, deterministic mode and the head dims.
        for index, (dtype, with_seqused, which) in enumerate(itertools.product(
                DTYPES, (False, True), range(3))):
            softcap = (None, 1.5)[index % 2]
            deterministic, head_dim = index % 3 == 0, HEAD_DIMS[index // 2 % 2]
            rng = self.rng(dtype, with_seqused, which)
            problem = Problem(rng, dtype, head_dim, with_seqused)
            mask = predicates(rng, problem)[which]
            with self.subTest(predicate=mask.name, dtype=dtype, seqused_k=with_seqused,
                              softcap=softcap, deterministic=deterministic, head_dim=head_dim):
                self.check(problem, dtype, False, (-1, -1), softcap, mask=mask)
                if deterministic:
                    first = problem.attnjit(False, (-1, -1), softcap, True, mask=mask)
                    second = problem.attnjit(False, (-1, -1), softcap, True, mask=mask)
                    for label, a, b in zip(("o", "lse", "dq", "dk", "dv"), first, second):
                        self.assertTrue(torch.equal(a, b), f"{label} differs between two runs")

    def test_predicate_masks_with_alibi_mqa_and_shared_boundaries(self):
        # ALiBi takes shared boundaries (varlen=shared); MQA and equal heads.
        for dtype, (heads, kv_heads), which in itertools.product(
                DTYPES, ((8, 1), (4, 4)), range(3)):
            rng = self.rng(dtype, heads, kv_heads, which, "shared")
            problem = Problem(rng, dtype, 64, False, heads, kv_heads, shared=True)
            mask = predicates(rng, problem)[which]
            with self.subTest(predicate=mask.name, dtype=dtype, heads=heads, kv_heads=kv_heads):
                self.check(problem, dtype, False, (-1, -1), mask=mask,
                           slopes=alibi_slopes(heads, problem.q.device))

    def test_bad_predicate_tensors_name_the_argument(self):
        problem = Problem(self.rng(), "bfloat16", 64, True)
        arguments = dict(q=problem.q, k=problem.k, v=problem.v,
                         cu_seqlens_q=problem.cu_seqlens_q, cu_seqlens_k=problem.cu_seqlens_k,
                         max_seqlen_q=problem.max_seqlen_q, max_seqlen_k=problem.max_seqlen_k,
                         seqused_k=problem.seqused_k)
        sequences = len(problem.seq_q)
        seg = torch.zeros(sequences, 300, dtype=torch.int32, device="cuda")
        for tensor, error, message in (
                (seg[:2], attnjit.AttnjitError,
                 rf"^tensors\['seg'\]: shape \(2, 300\); accepted: \[length\], or \[rows, "
                 rf"length\] with rows 1 \(shared by every sequence\) or {sequences} \(one per "
                 r"sequence of the packed batch\)$"),
                (seg[None], attnjit.AttnjitError, r"^tensors\['seg'\]: shape \(1, 7, 300\)"),
                (seg.long(), TypeError, r"^tensors\['seg'\]: expected an int32 torch.Tensor"),
                (seg.cpu(), attnjit.AttnjitError, r"^tensors\['seg'\]: on device cpu")):
            with self.subTest(message=message):
                mask = attnjit.predicate("seg[q] == seg[k]", tensors={"seg": tensor})
                with self.assertRaisesRegex(error, message):
                    attnjit.attention_varlen(**arguments, mask=mask)
        # One row, and one per sequence, run.
        for tensor in (seg[:1], seg, seg[0]):
            attnjit.attention_varlen(**arguments, mask=attnjit.predicate(
                "seg[q] == seg[k]", tensors={"seg": tensor}))
        # The padded path checks its rows against the batch the same way.
        q = torch.randn(2, 32, HEADS, 64, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(2, 32, KV_HEADS, 64, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(attnjit.AttnjitError,
                                    r"^tensors\['seg'\]: shape \(7, 300\); accepted: \[length\], "
                                    r"or \[rows, length\] with rows 1 \(shared by every batch\) or "
                                    r"2 \(the batch\)$"):
            attnjit.attention(q, k, k, mask=attnjit.predicate("seg[q] == seg[k]",
                                                             tensors={"seg": seg}))

    def test_max_seqlen_above_the_longest(self):
        problem = Problem(self.rng(), "bfloat16", 64, False)
        expected = problem.attnjit(True, (-1, -1), deterministic=True)
        problem.max_seqlen_q, problem.max_seqlen_k = problem.q.shape[0], problem.k.shape[0]
        for name, a, b in zip(("o", "lse", "dq", "dk", "dv"),
                              problem.attnjit(True, (-1, -1), deterministic=True), expected):
            self.assertTrue(torch.equal(a, b), name)

    def test_long_batches_whose_backward_ctas_walk_every_head_of_a_kv_head(self):
        # About 18K keys of 2 KV heads: 282 key blocks of 128, at least two rounds of the SMs of
        # an H100 or H200 (132), so the sm90a backward's CTAs each walk all 4 query heads of
        # their KV head (Extent::head_group) and sum dK and dV in registers (the atomic mode; the
        # deterministic mode keeps a CTA per query head). Causal, a window, FlashMask vectors per
        # KV head and ALiBi (a slope per query head).
        seq_q = [3001, 4099, 1, 2500, 5003, 3333, 5]
        seq_k = [3001, 4200, 77, 2500, 4907, 3333, 0]  # the last sequence's rows see no key
        cases = (("causal", True, (-1, -1), None, False), ("window", False, (300, 41), None, True),
                 ("vectors", True, (-1, -1), (True, 2), False),
                 ("vectors 4", False, (-1, -1), (False, 4), True))
        for index, (name, causal, window, arity, deterministic) in enumerate(cases):
            shared = index % 2 == 0
            lengths = (seq_q, list(seq_q) if shared else seq_k)
            dtype = DTYPES[index % 2]
            with self.subTest(mask=name, deterministic=deterministic, shared=shared):
                rng = self.rng(name, "long")
                problem = Problem(rng, dtype, 64, False, shared=shared, lengths=lengths)
                vectors = None if arity is None else Vectors(
                    rng, *arity, KV_HEADS, problem.seq_q, problem.seq_k, problem.q.device)
                slopes = alibi_slopes(HEADS, problem.q.device) if shared else None
                self.check(problem, dtype, causal, window, vectors=vectors, slopes=slopes,
                           deterministic=deterministic)

    def test_deterministic_gradients_are_bitwise_repeatable(self):
        for dtype, (name, causal, window) in itertools.product(DTYPES, MASKS[:3]):
            with self.subTest(dtype=dtype, mask=name):
                problem = Problem(self.rng(dtype, name), dtype, 128, True)
                first = problem.attnjit(causal, window, deterministic=True)
                second = problem.attnjit(causal, window, deterministic=True)
                for label, a, b in zip(("o", "lse", "dq", "dk", "dv"), first, second):
                    self.assertTrue(torch.equal(a, b), f"{label} differs between two runs")

    def test_gradients_of_some_inputs_and_expanded_d_o(self):
        problem = Problem(self.rng(), "bfloat16", 64, False)
        q = problem.q.detach().clone().requires_grad_()
        o = attnjit.attention_varlen(q, problem.k, problem.v, problem.cu_seqlens_q,
                                     problem.cu_seqlens_k, problem.max_seqlen_q,
                                     problem.max_seqlen_k, causal=True)
        self.assertEqual(tuple(o.shape), tuple(problem.q.shape))
        o.sum().backward()  # an expanded (stride 0) dO
        leaves = [t.detach().double().requires_grad_() for t in (problem.q, problem.k, problem.v)]
        out, _ = packed_attention(*leaves, problem.cu_q, problem.cu_k, problem.used, True,
                                  (-1, -1), 1 / 8)
        out.sum().backward()
        lowp = [t.detach().clone().requires_grad_() for t in (problem.q, problem.k, problem.v)]
        packed_attention(*lowp, problem.cu_q, problem.cu_k, problem.used, True, (-1, -1),
                         1 / 8)[0].sum().backward()
        self.assert_close("dq", q.grad, leaves[0].grad, lowp[0].grad)
        self.assertIsNone(problem.k.grad)

    def test_bad_tensors_name_the_argument(self):
        problem = Problem(self.rng(), "bfloat16", 64, True)
        arguments = dict(q=problem.q, k=problem.k, v=problem.v,
                         cu_seqlens_q=problem.cu_seqlens_q, cu_seqlens_k=problem.cu_seqlens_k,
                         max_seqlen_q=problem.max_seqlen_q, max_seqlen_k=problem.max_seqlen_k,
                         seqused_k=problem.seqused_k, causal=True)
        total_k = problem.k.shape[0]
        vectors = torch.zeros(1, KV_HEADS, total_k, 1, dtype=torch.int32, device="cuda")
        slopes = alibi_slopes(HEADS, problem.q.device)
        shared = Problem(self.rng("shared"), "bfloat16", 64, False, shared=True)
        for change, error, message in (
                (dict(q=problem.q[None]), attnjit.AttnjitError, "q: rank 4"),
                (dict(cu_seqlens_q=problem.cu_seqlens_q.long()), TypeError,
                 "cu_seqlens_q: dtype torch.int64; accepted: torch.int32"),
                (dict(cu_seqlens_k=problem.cu_seqlens_k[:-1]), attnjit.AttnjitError,
                 "cu_seqlens_k: shape"),
                (dict(cu_seqlens_q=problem.cu_seqlens_q.cpu()), attnjit.AttnjitError,
                 "cu_seqlens_q: on device cpu"),
                (dict(seqused_k=problem.seqused_k[:-1]), attnjit.AttnjitError,
                 "seqused_k: shape"),
                (dict(max_seqlen_q=problem.q.shape[0] + 1), attnjit.AttnjitError,
                 "max_seqlen_q: got"),
                (dict(max_seqlen_k=torch.tensor(3)), TypeError,
                 "max_seqlen_k: expected a Python int"),
                (dict(startend_row_indices=vectors.long()), TypeError,
                 "startend_row_indices: dtype torch.int64; accepted: torch.int32"),
                (dict(startend_row_indices=vectors[0]), attnjit.AttnjitError,
                 r"startend_row_indices: shape \(2, \d+, 1\); accepted: \[B=1, Hm in \(1, 2\), "
                 r"total_k=\d+, C\] with C in 1, 2, 4 \(a packed batch's vectors"),
                (dict(startend_row_indices=vectors[:, :, 1:]), attnjit.AttnjitError,
                 "startend_row_indices: shape"),
                (dict(startend_row_indices=vectors.cpu()), attnjit.AttnjitError,
                 "startend_row_indices: on device cpu"),
                (dict(startend_row_indices=vectors.expand(1, 2, -1, 2)), attnjit.AttnjitError,
                 "startend_row_indices: not contiguous"),
                (dict(startend_row_indices=vectors, causal=False), ValueError,
                 r"startend_row_indices: C=1 \(shape \(1, 2, \d+, 1\)\) with causal=False; "
                 r"accepted: C=2 \(LTS, UTE\) or 4 \(LTS, LTE, UTS, UTE\)"),
                (dict(startend_row_indices=torch.cat([vectors] * 4, -1)), ValueError,
                 r"startend_row_indices: C=4 .* with causal=True; accepted: C=1 \(LTS\) or "
                 r"2 \(LTS, LTE\)"),
                (dict(startend_row_indices=vectors, causal=True, window_size=(16, -1)),
                 ValueError, r"window_size: got \(16, -1\) with startend_row_indices"),
                (dict(alibi_slopes=slopes), ValueError,
                 "alibi_slopes: given with boundaries of the keys' own"),
                (dict(alibi_slopes=slopes, cu_seqlens_k=problem.cu_seqlens_q), ValueError,
                 r"alibi_slopes: given .* accepted: None, or shared boundaries"),
                (dict(alibi_slopes=slopes, seqused_k=None), ValueError,
                 "alibi_slopes: given with boundaries of the keys' own")):
            with self.subTest(change=sorted(change)):
                with self.assertRaisesRegex(error, message):
                    attnjit.attention_varlen(**{**arguments, **change})
        # ALiBi's slopes themselves, with shared boundaries.
        shared_arguments = dict(q=shared.q, k=shared.k, v=shared.v,
                                cu_seqlens_q=shared.cu_seqlens_q,
                                cu_seqlens_k=shared.cu_seqlens_q,
                                max_seqlen_q=shared.max_seqlen_q,
                                max_seqlen_k=shared.max_seqlen_k)
        for bad, error, message in (
                (slopes[:3], attnjit.AttnjitError,
                 r"alibi_slopes: shape \(3,\); accepted: \[H=8\], one slope per query head"),
                (slopes.double(), TypeError,
                 "alibi_slopes: dtype torch.float64; accepted: torch.float32"),
                (slopes.cpu(), attnjit.AttnjitError, "alibi_slopes: on device cpu")):
            with self.subTest(alibi_slopes=message):
                with self.assertRaisesRegex(error, message):
                    attnjit.attention_varlen(**shared_arguments, alibi_slopes=bad)


@unittest.skipUnless(HAS_OPS, "needs PyTorch 2.4+ (torch.library.custom_op) and a CUDA device")
class VarlenGraphTest(TemporaryCacheTest):
    """torch.compile and CUDA graphs: the boundaries are device data, max_seqlen Python ints."""

    def setUp(self):
        torch._dynamo.reset()

    def test_compile_fullgraph_equals_eager(self):
        problem = Problem(random.Random(f"{SEED}:compile"), "bfloat16", 128, True)

        def f(q, k, v, cu_q, cu_k, used):
            o, lse = attnjit.attention_varlen(q, k, v, cu_q, cu_k, problem.max_seqlen_q,
                                              problem.max_seqlen_k, causal=True,
                                              seqused_k=used, deterministic=True,
                                              return_lse=True)
            return o * 2, lse

        self.assert_compiled_equals_eager(f, problem, problem.cu_seqlens_q,
                                          problem.cu_seqlens_k, problem.seqused_k)

    def test_compile_fullgraph_with_vectors_and_alibi(self):
        # The FlashMask vectors and ALiBi's slopes are graph inputs; shared boundaries (one
        # tensor for both) keep ALiBi's spec varlen=shared while tracing.
        rng = random.Random(f"{SEED}:compile vectors")
        problem = Problem(rng, "bfloat16", 64, False, shared=True)
        vectors = Vectors(rng, False, 4, KV_HEADS, problem.seq_q, problem.seq_k,
                          problem.q.device)

        def f(q, k, v, cu, indices, slopes):
            o, lse = attnjit.attention_varlen(q, k, v, cu, cu, problem.max_seqlen_q,
                                              problem.max_seqlen_k, alibi_slopes=slopes,
                                              startend_row_indices=indices, deterministic=True,
                                              return_lse=True)
            return o * 2, lse

        self.assert_compiled_equals_eager(f, problem, problem.cu_seqlens_q, vectors.tensor,
                                          alibi_slopes(HEADS, problem.q.device))

    def test_compile_fullgraph_with_a_predicate(self):
        # The predicate's tensors are graph inputs, bound inside the compiled function.
        rng = random.Random(f"{SEED}:compile predicate")
        problem = Problem(rng, "bfloat16", 128, True)
        mask = predicates(rng, problem)[1].mask

        def f(q, k, v, cu_q, cu_k, used, seg, off):
            o, lse = attnjit.attention_varlen(q, k, v, cu_q, cu_k, problem.max_seqlen_q,
                                              problem.max_seqlen_k, seqused_k=used,
                                              mask=mask.bind(seg=seg, off=off),
                                              deterministic=True, return_lse=True)
            return o * 2, lse

        self.assert_compiled_equals_eager(f, problem, problem.cu_seqlens_q,
                                          problem.cu_seqlens_k, problem.seqused_k,
                                          mask.tensors["seg"], mask.tensors["off"])

    def test_fake_tensors_check_the_predicate_rows(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            q = torch.empty(100, 4, 64, dtype=torch.bfloat16, device="cuda")
            k = torch.empty(120, 2, 64, dtype=torch.bfloat16, device="cuda")
            cu = torch.empty(4, dtype=torch.int32, device="cuda")
            for rows, accepted in ((3, True), (1, True), (2, False)):
                seg = torch.empty(rows, 50, dtype=torch.int32, device="cuda")
                mask = attnjit.predicate("seg[q] == seg[k]", tensors={"seg": seg})
                with self.subTest(rows=rows):
                    if accepted:
                        o, lse = attnjit.attention_varlen(q, k, k, cu, cu, 50, 50, mask=mask,
                                                          return_lse=True)
                        self.assertEqual((tuple(o.shape), tuple(lse.shape)),
                                         ((100, 4, 64), (4, 100)))
                        continue
                    with self.assertRaisesRegex(attnjit.AttnjitError,
                                                r"^tensors\['seg'\]: shape \(2, 50\); accepted: "
                                                r"\[length\], or \[rows, length\] with rows 1 "
                                                r"\(shared by every sequence\) or 3 \(one per "
                                                r"sequence of the packed batch\)$"):
                        attnjit.attention_varlen(q, k, k, cu, cu, 50, 50, mask=mask)

    def assert_compiled_equals_eager(self, f, problem, *inputs):
        """f(q, k, v, *inputs) -> (o, lse) compiled with fullgraph=True gives eager's o, lse
        and gradients bitwise, and torch._dynamo.explain counts no graph break."""
        def run(function):
            leaves = [t.detach().clone().requires_grad_() for t in (problem.q, problem.k,
                                                                      problem.v)]
            o, lse = function(*leaves, *inputs)
            o.backward(problem.d_o)
            return [o.detach(), lse] + [t.grad for t in leaves]

        eager = run(f)
        compiled = run(torch.compile(f, fullgraph=True))
        for name, a, b in zip(("o", "lse", "dq", "dk", "dv"), compiled, eager):
            self.assertTrue(torch.equal(a, b), f"{name}: compiled differs from eager")
        explanation = torch._dynamo.explain(f)(problem.q, problem.k, problem.v, *inputs)
        self.assertEqual(explanation.graph_break_count, 0, explanation.break_reasons)

    def capture(self, step):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = step()
        return graph, outputs

    def test_graph_replays_new_boundaries(self):
        for through_operators, with_predicate in itertools.product((False, True), repeat=2):
            with self.subTest(through_operators=through_operators, predicate=with_predicate):
                attnjit._EAGER_DIRECT = not through_operators
                try:
                    self.check_graph_replay(through_operators, with_predicate)
                finally:
                    attnjit._EAGER_DIRECT = True

    def check_graph_replay(self, tag, with_predicate):
        rng = random.Random(f"{SEED}:graph:{tag}:{with_predicate}")
        problem = Problem(rng, "bfloat16", 64, True)
        total_q, total_k = problem.cu_q[-1], problem.cu_k[-1]
        max_q, max_k = total_q, total_k  # bounds any later split of the same totals
        # lim[b] (sequence b's key limit) and per-sequence segments as wide as any later
        # sequence: they do not depend on the lengths, so they stay valid after new boundaries.
        predicate = predicates(rng, problem, max(total_q, total_k))[0] if with_predicate \
            else None
        causal = predicate is None
        q, k, v = (t.detach().clone().requires_grad_() for t in (problem.q, problem.k,
                                                                  problem.v))
        cu_q, cu_k = problem.cu_seqlens_q.clone(), problem.cu_seqlens_k.clone()
        used = problem.seqused_k.clone()
        d_o = problem.d_o

        def step():
            o, lse = attnjit.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal,
                                              seqused_k=used, deterministic=True,
                                              return_lse=True,
                                              mask=None if predicate is None else predicate.mask)
            return (o, lse) + torch.autograd.grad(o, (q, k, v), d_o)

        graph, outputs = self.capture(step)
        # New boundaries of the same shapes and totals: other lengths, a new seqused_k.
        for _ in range(2):
            cuts_q = sorted(rng.randint(0, total_q) for _ in range(len(problem.seq_q) - 1))
            cuts_k = sorted(rng.randint(0, total_k) for _ in range(len(problem.seq_k) - 1))
            new_q, new_k = [0] + cuts_q + [total_q], [0] + cuts_k + [total_k]
            new_used = [rng.randint(0, new_k[s + 1] - new_k[s]) for s in range(len(cuts_k) + 1)]
            cu_q.copy_(torch.tensor(new_q, dtype=torch.int32))
            cu_k.copy_(torch.tensor(new_k, dtype=torch.int32))
            used.copy_(torch.tensor(new_used, dtype=torch.int32))
            graph.replay()
            torch.cuda.synchronize()
            expected = step()
            for name, got, want in zip(("o", "lse", "dq", "dk", "dv"), outputs, expected):
                self.assertTrue(torch.equal(got, want), f"{name} differs after replay")
            # And the replayed output is right, not only repeatable.
            problem.cu_q, problem.cu_k, problem.used = new_q, new_k, new_used
            ref = problem.reference(torch.float64, causal, (-1, -1), mask=predicate)
            lowp = problem.reference(torch.bfloat16, causal, (-1, -1), mask=predicate)
            self.assert_close("o after replay", outputs[0], ref[0], lowp[0])

    assert_close = VarlenTest.assert_close

    def test_no_host_synchronisation(self):
        problem = Problem(random.Random(f"{SEED}:sync"), "float16", 64, True)
        problem.attnjit(True, (64, -1))  # compile, load
        q = problem.q.detach().clone().requires_grad_()
        torch.cuda.set_sync_debug_mode("error")
        try:
            o = attnjit.attention_varlen(q, problem.k, problem.v, problem.cu_seqlens_q,
                                         problem.cu_seqlens_k, problem.max_seqlen_q,
                                         problem.max_seqlen_k, causal=True, window_size=(64, -1),
                                         seqused_k=problem.seqused_k)
            o.backward(problem.d_o)
        finally:
            torch.cuda.set_sync_debug_mode("default")


if __name__ == "__main__":
    unittest.main()
