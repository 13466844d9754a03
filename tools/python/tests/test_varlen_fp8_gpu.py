"""FP8 packed batches: attnjit.attention_varlen with e4m3 q, k, v (bf16 o) on an sm_90 GPU,
against a float64 reference computed sequence by sequence on the values the e4m3 inputs stand
for (each byte times its descale factor).

The sequences' magnitudes differ (each (sequence, head) draws its own spread), so descales per
(sequence, KV head) matter: a factor applied to the wrong rows gives errors near 1, where the
kernel's rounding of P to e4m3 stays below the relative criterion of 4e-2 (checked over every
sequence alone as well as over the batch). Ragged lengths with empty and length-1 sequences,
lengths that are no tile multiples, Sq != Sk per sequence and seqused_k, GQA, head dims 64, 128
and 256, the masks none, causal, sliding_window and FlashMask vectors, descales per sequence,
per tensor and mixed; rows that see no key give o = 0 and lse = -inf; attnjit.fp8.quantize of
packed tensors (factors per sequence, q and k rotated) against float64 attention on the values
its bytes and factors stand for; the attnjit::forward_varlen operator under
torch.compile(fullgraph=True) equals eager; bad inputs raise naming the argument.

Skipped unless PyTorch with torch.float8_e4m3fn and an sm_90 device are available. The data are
fresh on every run; the seed is printed, and ATTNJIT_TEST_SEED=<number> repeats a run.

Run: ATTNJIT_LIBRARY=build/libattnjit.so python3 -m unittest discover -s tools/python/tests \
         -p test_varlen_fp8_gpu.py -v
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

HAS_FP8 = (HAS_CUDA and hasattr(torch, "float8_e4m3fn")
           and torch.cuda.get_device_capability() == (9, 0))
HAS_OPS = HAS_FP8 and attnjit._ops is not None
SEED = run_seed()
E4M3_MAX = 448.0


def setUpModule():
    if HAS_FP8:
        print(f"\ntest_varlen_fp8_gpu: seed {SEED} (ATTNJIT_TEST_SEED={SEED} repeats this run)",
              flush=True)


def boundaries(lengths):
    """int32 cu_seqlens [B + 1] of `lengths` on the GPU, and the host list."""
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32, device="cuda"), cu


def quantize(x, cu, kv_heads, per_tensor):
    """(e4m3 bytes, fp32 descale, float64 values they stand for) of packed x [total, Hx, D]:
    one descale for the tensor, or one per (sequence, KV head) [B, Hkv] (a query head takes
    its KV head's), mapping the largest magnitude to e4m3's largest finite value."""
    total, heads, dim = x.shape
    if per_tensor:
        descale = (x.abs().amax() / E4M3_MAX).clamp_min(1e-12).reshape(1).float()
        scale = descale.double().expand(total).view(total, 1, 1).expand(total, heads, 1)
    else:
        group = heads // kv_heads
        descale = torch.full((len(cu) - 1, kv_heads), 1e-12, dtype=torch.float32,
                             device=x.device)
        scale = torch.empty(total, heads, 1, dtype=torch.float64, device=x.device)
        for s in range(len(cu) - 1):
            rows = x[cu[s]:cu[s + 1]].view(-1, kv_heads, group, dim)
            if rows.shape[0] > 0:
                descale[s] = (rows.abs().amax(dim=(0, 2, 3)) / E4M3_MAX).clamp_min(1e-12)
            scale[cu[s]:cu[s + 1]] = descale[s].double().repeat_interleave(group)[None, :, None]
    x8 = (x / scale).to(torch.float8_e4m3fn)
    return x8, descale, x8.double() * scale


def visible(mask, sq, sk, window, lts=None):
    """Bool [sq, sk] of one sequence, bottom-right aligned; `lts` [sk] the FlashMask LTS vector
    (with causal: rows from lts[j] on hide key j)."""
    rows = torch.arange(sq)[:, None] + sk - sq
    cols = torch.arange(sk)[None, :]
    if mask == "none":
        seen = torch.ones(sq, sk, dtype=torch.bool)
    elif mask == "sliding_window":
        left, right = window
        seen = (cols >= rows - left) & (cols <= rows + right)
    else:
        seen = cols <= rows
    if lts is not None:
        seen &= torch.arange(sq)[:, None] < lts[None, :]
    return seen


class VarlenFp8Case(TemporaryCacheTest):
    def draw(self, tag, lengths, heads, dim):
        """Float64 [sum(lengths), heads, dim] on the GPU, each (sequence, head) of its own
        spread (0.5 to 4)."""
        generator = torch.Generator().manual_seed(random.Random(f"{SEED}:{self.id()}:{tag}")
                                                  .randrange(2**63))
        parts = []
        for n in lengths:
            spread = torch.rand(1, heads, 1, generator=generator, dtype=torch.float64) * 3.5 + 0.5
            parts.append(torch.randn(n, heads, dim, generator=generator,
                                     dtype=torch.float64) * spread)
        return torch.cat(parts).cuda()

    def check(self, d, mask, seq_q, seq_k, heads, kv_heads, granularity, used=None,
              window=(-1, -1), lts=None):
        """Runs one case and compares it with the float64 reference; granularity: "sequence",
        "tensor" or "mixed" (q per tensor, k and v per sequence)."""
        cu_q, host_q = boundaries(seq_q)
        shared = seq_k is None
        cu_k, host_k = (cu_q, host_q) if shared else boundaries(seq_k)
        keys = seq_q if shared else seq_k
        q = self.draw("q", seq_q, heads, d)
        k = self.draw("k", keys, kv_heads, d)
        v = self.draw("v", keys, kv_heads, d)
        per_tensor = {"sequence": (False,) * 3, "tensor": (True,) * 3,
                      "mixed": (True, False, False)}[granularity]
        q8, q_descale, q64 = quantize(q, host_q, kv_heads, per_tensor[0])
        k8, k_descale, k64 = quantize(k, host_k, kv_heads, per_tensor[1])
        v8, v_descale, v64 = quantize(v, host_k, kv_heads, per_tensor[2])
        seqused = None if used is None else torch.tensor(used, dtype=torch.int32, device="cuda")
        vectors = None
        if lts is not None:
            vectors = torch.cat([torch.tensor(x, dtype=torch.int32) for x in lts])
            vectors = vectors.view(1, 1, -1, 1).contiguous().cuda()
        causal = mask in ("causal", "flashmask")
        o, lse = attnjit.attention_varlen(
            q8, k8, v8, cu_q, cu_k, max(seq_q), max(keys), causal=causal,
            window_size=window if mask == "sliding_window" else (-1, -1), seqused_k=seqused,
            startend_row_indices=vectors, return_lse=True, q_descale=q_descale,
            k_descale=k_descale, v_descale=v_descale)
        self.assertEqual(o.dtype, torch.bfloat16)
        self.assertEqual(tuple(o.shape), (host_q[-1], heads, d))
        self.assertEqual(tuple(lse.shape), (heads, host_q[-1]))
        scale = 1.0 / math.sqrt(d)
        group = heads // kv_heads
        ref = torch.zeros_like(q64)
        blind = torch.zeros(host_q[-1], dtype=torch.bool)
        for s in range(len(seq_q)):
            sq = seq_q[s]
            sk = keys[s] if used is None else used[s]
            if sq == 0:
                continue
            seen = visible(mask, sq, sk, window,
                           None if lts is None else torch.tensor(lts[s][:sk])).cuda()
            blind[host_q[s]:host_q[s + 1]] = ~seen.any(dim=1).cpu()
            qs = q64[host_q[s]:host_q[s + 1]]
            ks = k64[host_k[s]:host_k[s] + sk].repeat_interleave(group, dim=1)
            vs = v64[host_k[s]:host_k[s] + sk].repeat_interleave(group, dim=1)
            scores = torch.einsum("qhd,khd->hqk", qs, ks) * scale
            scores = scores.masked_fill(~seen, float("-inf"))
            probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
            ref[host_q[s]:host_q[s + 1]] = torch.einsum("hqk,khd->qhd", probs, vs)
            expected = ref[host_q[s]:host_q[s + 1]]
            got = o[host_q[s]:host_q[s + 1]].double()
            if expected.norm() > 0:
                error = ((got - expected).norm() / expected.norm()).item()
                self.assertLessEqual(error, 4e-2, f"sequence {s}: relative error {error:.3e}, "
                                     f"seed {SEED}")
        error = ((o.double() - ref).norm() / ref.norm()).item()
        self.assertLessEqual(error, 4e-2, f"relative error {error:.3e}, seed {SEED}")
        blind = blind.cuda()
        self.assertTrue(torch.equal(o[blind], torch.zeros_like(o[blind])))
        self.assertTrue(torch.isneginf(lse[:, blind]).all())
        self.assertTrue(torch.isfinite(lse[:, ~blind]).all())
        return o


@unittest.skipUnless(HAS_FP8, "needs PyTorch with float8_e4m3fn and an sm_90 CUDA device")
class VarlenFp8Test(VarlenFp8Case):
    def test_causal_shared_boundaries_gqa(self):
        self.check(128, "causal", [300, 0, 1, 700, 129], None, 8, 2, "sequence")

    def test_separate_boundaries_and_seqused_k(self):
        # Sq != Sk per sequence; seqused_k cuts the keys short of their buffers.
        self.check(64, "none", [100, 1, 250, 0], [333, 64, 250, 17], 4, 4, "tensor")
        self.check(256, "causal", [130, 65, 1], [270, 200, 40], 4, 1, "sequence",
                   used=[200, 65, 0])

    def test_sliding_window_and_mixed_granularity(self):
        self.check(128, "sliding_window", [500, 77, 260], None, 4, 2, "mixed", window=(100, 20))

    def test_flashmask_vectors_inside_each_sequence(self):
        # causal=True, C=1: key j of a sequence hides the rows from lts[j] on (documents inside
        # each sequence: a key's rows end where its document ends).
        seq = [300, 1, 450]
        lts = []
        for n in seq:
            cut = n // 3
            lts.append([cut if j < cut else n for j in range(n)])
        self.check(128, "flashmask", seq, None, 8, 2, "sequence", lts=lts)

    def test_per_sequence_factors_are_the_rows(self):
        # Scaling one sequence's v_descale scales that sequence's rows of o alone.
        seq = [200, 300]
        cu, host = boundaries(seq)
        q = self.draw("q", seq, 4, 128)
        k = self.draw("k", seq, 2, 128)
        v = self.draw("v", seq, 2, 128)
        q8, q_descale, _ = quantize(q, host, 2, False)
        k8, k_descale, _ = quantize(k, host, 2, False)
        v8, v_descale, _ = quantize(v, host, 2, False)
        base = attnjit.attention_varlen(q8, k8, v8, cu, cu, 300, 300, causal=True,
                                        q_descale=q_descale, k_descale=k_descale,
                                        v_descale=v_descale)
        doubled = v_descale.clone()
        doubled[1] *= 2
        scaled = attnjit.attention_varlen(q8, k8, v8, cu, cu, 300, 300, causal=True,
                                          q_descale=q_descale, k_descale=k_descale,
                                          v_descale=doubled)
        self.assertTrue(torch.equal(scaled[:200], base[:200]))
        self.assertTrue(torch.allclose(scaled[200:].float(), 2 * base[200:].float(),
                                       rtol=1e-2, atol=1e-3))

    def test_quantize_packed_batches(self):
        # attnjit.fp8.quantize with cu_seqlens: factors per (sequence, KV head), q and k
        # rotated; o against float64 attention on the values its bytes and factors stand for.
        seq = [200, 0, 57, 300]
        cu, host = boundaries(seq)
        q = self.draw("q", seq, 4, 128)
        k = self.draw("k", seq, 2, 128)
        v = self.draw("v", seq, 2, 128)
        q8, k8, v8, descales = attnjit.fp8.quantize(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu)
        self.assertEqual(tuple(descales["q_descale"].shape), (4, 2))
        _, plain, _ = quantize(v, host, 2, False)
        for s in (0, 2, 3):
            self.assertTrue(torch.allclose(descales["v_descale"][s], plain[s]))
        self.assertTrue(torch.equal(descales["v_descale"][1], torch.ones(2, device="cuda")))
        sequence = torch.repeat_interleave(torch.arange(len(seq)), torch.tensor(seq)).cuda()

        def values(x8, descale):
            group = x8.shape[1] // 2
            return x8.double() * descale[sequence].double().repeat_interleave(group, 1)[..., None]

        q64 = values(q8, descales["q_descale"])
        k64 = values(k8, descales["k_descale"]).repeat_interleave(2, dim=1)
        v64 = values(v8, descales["v_descale"]).repeat_interleave(2, dim=1)
        # The rotation keeps the scores: the rotated values' against the inputs' (the
        # quantization's error alone).
        scores = torch.einsum("qhd,khd->hqk", q64[:200], k64[:200])
        exact = torch.einsum("qhd,khd->hqk", q[:200], k[:200].repeat_interleave(2, dim=1))
        self.assertLessEqual(((scores - exact).norm() / exact.norm()).item(), 0.1)
        o = attnjit.attention_varlen(q8, k8, v8, cu, cu, 300, 300, causal=True, **descales)
        ref = torch.zeros_like(q64)
        for s in range(len(seq)):
            n = seq[s]
            if n == 0:
                continue
            rows = slice(host[s], host[s + 1])
            scores = torch.einsum("qhd,khd->hqk", q64[rows], k64[rows]) / math.sqrt(128)
            scores = scores.masked_fill(~visible("causal", n, n, None).cuda(), float("-inf"))
            ref[rows] = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v64[rows])
        error = ((o.double() - ref).norm() / ref.norm()).item()
        self.assertLessEqual(error, 4e-2, f"relative error {error:.3e}, seed {SEED}")
        with self.assertRaisesRegex(attnjit.AttnjitError, "cu_seqlens_k: got NoneType"):
            attnjit.fp8.quantize(q, k, v, cu_seqlens_q=cu)

    def test_bad_inputs_name_the_argument(self):
        seq = [64, 32]
        cu, host = boundaries(seq)
        q = self.draw("q", seq, 2, 128)
        q8 = q.to(torch.float8_e4m3fn)
        bf16 = q.to(torch.bfloat16)
        descale = torch.ones(2, 2, dtype=torch.float32, device="cuda")
        with self.assertRaisesRegex(attnjit.AttnjitError, "q_descale: given with q of dtype"):
            attnjit.attention_varlen(bf16, bf16, bf16, cu, cu, 64, 64, q_descale=descale)
        with self.assertRaisesRegex(attnjit.AttnjitError,
                                    r"k_descale: shape \(3, 2\).*\[B=2, Hkv=2\] \(per sequence"):
            attnjit.attention_varlen(q8, q8, q8, cu, cu, 64, 64,
                                     k_descale=torch.ones(3, 2, device="cuda"))
        with self.assertRaisesRegex(TypeError, "v_descale: dtype torch.float16"):
            attnjit.attention_varlen(q8, q8, q8, cu, cu, 64, 64, v_descale=descale.half())
        with self.assertRaisesRegex(TypeError, "k: dtype torch.bfloat16 but q is"):
            attnjit.attention_varlen(q8, bf16, q8, cu, cu, 64, 64)
        with self.assertRaisesRegex(attnjit.AttnjitError, "mask: an element predicate"):
            attnjit.attention_varlen(q8, q8, q8, cu, cu, 64, 64,
                                     mask=attnjit.predicate("q >= k"))
        grad = q8.clone().requires_grad_()
        with self.assertRaisesRegex(attnjit.AttnjitError, "q: requires grad"):
            attnjit.attention_varlen(grad, q8, q8, cu, cu, 64, 64)
        with self.assertRaisesRegex(attnjit.AttnjitError, "head_dim"):
            q96 = self.draw("q96", seq, 2, 96).to(torch.float8_e4m3fn)
            attnjit.attention_varlen(q96, q96, q96, cu, cu, 64, 64)


@unittest.skipUnless(HAS_OPS, "needs PyTorch 2.4+ (torch.library.custom_op) and an sm_90 device")
class CompiledVarlenFp8Test(VarlenFp8Case):
    def test_compiled_equals_eager(self):
        seq = [200, 0, 57, 300]
        cu, host = boundaries(seq)
        q8, q_descale, _ = quantize(self.draw("q", seq, 4, 128), host, 2, False)
        k8, k_descale, _ = quantize(self.draw("k", seq, 2, 128), host, 2, False)
        v8, v_descale, _ = quantize(self.draw("v", seq, 2, 128), host, 2, True)

        def f(q8, k8, v8, cu, q_descale, k_descale, v_descale):
            return attnjit.attention_varlen(q8, k8, v8, cu, cu, 300, 300, causal=True,
                                            q_descale=q_descale, k_descale=k_descale,
                                            v_descale=v_descale)

        arguments = (q8, k8, v8, cu, q_descale, k_descale, v_descale)
        eager = f(*arguments)
        compiled = torch.compile(f, fullgraph=True)(*arguments)
        self.assertEqual(compiled.dtype, torch.bfloat16)
        self.assertTrue(torch.equal(compiled, eager))


if __name__ == "__main__":
    unittest.main()
