"""The mask objects on a CUDA device: attnjit.forward takes predicates (element predicates and
masks of the mask language) and gives attnjit.attention's output; a mask of the language
computes the attention of its definition; attnjit.flashmask of an expression runs like the
family it names; a spec's predicate literals reach the launch; Kernel.ptx of a kernel compiled
for the device; forward with a predicate under torch.compile(fullgraph=True).

Skipped unless PyTorch and a CUDA device are available.
Run: python3 tools/python/tests/run_tests.py --gpu (ATTNJIT_LIBRARY may name the library).
"""

import math
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402

from torch_cuda import HAS_CUDA, torch  # noqa: E402


def qkv(seqlen, heads=4, kv_heads=2, dim=64, batch=1, seed=0):
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return [torch.randn(batch, seqlen, h, dim, generator=generator).to("cuda", torch.bfloat16)
            for h in (heads, kv_heads, kv_heads)]


def reference(q, k, v, visible):
    """fp32 attention with a dense visibility [Sq, Sk] (True: visible), GQA expanded."""
    group = q.shape[2] // k.shape[2]
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    kf = kf.repeat_interleave(group, dim=1)
    vf = vf.repeat_interleave(group, dim=1)
    scores = qf @ kf.transpose(-1, -2) / math.sqrt(q.shape[3])
    scores = scores.masked_fill(~visible.to(scores.device), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vf).transpose(1, 2)


@unittest.skipUnless(HAS_CUDA, "needs PyTorch and a CUDA device")
class MaskObjectsOnTheDevice(unittest.TestCase):
    def test_forward_takes_an_element_predicate(self):
        q, k, v = qkv(300)
        mask = attnjit.predicate("q >= k && q - k < 64")
        o = attnjit.forward(q, k, v, mask=mask)
        o_lse, lse = attnjit.forward(q, k, v, mask=mask, return_lse=True)
        self.assertTrue(torch.equal(o, attnjit.attention(q, k, v, mask=mask)))
        self.assertTrue(torch.equal(o, o_lse))
        self.assertEqual(tuple(lse.shape), (1, 4, 300))
        rows = torch.arange(300)
        visible = (rows[:, None] >= rows[None, :]) & (rows[:, None] - rows[None, :] < 64)
        torch.testing.assert_close(o.float(), reference(q, k, v, visible), atol=2e-2, rtol=0)

    def test_a_union_of_families_is_its_definition(self):
        q, k, v = qkv(10, batch=2)
        mask = attnjit.predicate("document([4,3,3]) | sliding_window(2)")
        o = attnjit.attention(q, k, v, mask=mask)
        self.assertTrue(torch.equal(o, attnjit.forward(q, k, v, mask=mask)))
        doc = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2, 2])
        rows = torch.arange(10)
        visible = (doc[:, None] == doc[None, :]) | (
            (rows[:, None] >= rows[None, :]) & (rows[:, None] - rows[None, :] < 2))
        torch.testing.assert_close(o.float(), reference(q, k, v, visible), atol=2e-2, rtol=0)
        built = mask.build(2, 10, 10, q.device)
        self.assertEqual(built.tensors["_doc0"].device, q.device)

    def test_flashmask_of_an_expression_runs_like_the_family(self):
        q, k, v = qkv(10)
        by_text = attnjit.flashmask("document([4,3,3])", seqlen=10)
        by_name = attnjit.flashmask("document", seqlen=10, doc_lengths=[4, 3, 3])
        self.assertTrue(torch.equal(attnjit.forward(q, k, v, mask=by_text),
                                    attnjit.forward(q, k, v, mask=by_name)))
        # A combination of the language that FlashMask vectors hold computes the same mask.
        derived = attnjit.predicate("document([4,3,3]) & full")
        torch.testing.assert_close(attnjit.forward(q, k, v, mask=derived),
                                   attnjit.forward(q, k, v, mask=by_name), atol=1e-2, rtol=0)

    def test_a_spec_runs_with_its_predicate_literals(self):
        q, k, v = qkv(256)
        spec = "dtype=bf16 head_dim=64 mask=predicate(q>=k&&(q-k)<32)"
        o = attnjit.forward(q, k, v, spec=spec)
        expected = attnjit.forward(q, k, v, mask=attnjit.predicate("q >= k && q - k < 32"))
        torch.testing.assert_close(o, expected, atol=1e-2, rtol=0)
        kernel = attnjit.compile(spec)
        self.assertEqual(kernel.info()["predicate_scalars"], [32])
        self.assertTrue(all(".entry" in text for text in kernel.ptx()))

    @unittest.skipUnless(HAS_CUDA and attnjit._ops is not None,
                         "needs PyTorch 2.4+ (torch.library.custom_op)")
    def test_forward_with_a_predicate_compiles_without_a_graph_break(self):
        q, k, v = qkv(128)
        doc = (torch.arange(128, device="cuda", dtype=torch.int32) // 48).contiguous()
        mask = attnjit.predicate("q >= k && doc[q] == doc[k]", tensors={"doc": doc})

        def f(q, k, v, doc):
            return attnjit.forward(q, k, v, mask=mask.bind(doc=doc))

        compiled = torch.compile(f, fullgraph=True)
        self.assertTrue(torch.equal(compiled(q, k, v, doc), f(q, k, v, doc)))


if __name__ == "__main__":
    unittest.main()
