"""attnjit.build_mask and attnjit.validate_intervals on a CUDA device: the ten-token examples of
flashmask.md, document vectors from padded cu_seqlens rows against a torch reference, a side
stream, the first bad element named by validate_intervals, and a forward pass over built
vectors equal to one over the reference vectors.

Skipped unless PyTorch and a CUDA device are available.
Run: python3 -m unittest discover -s tools/python/tests (ATTNJIT_LIBRARY may name the library).
"""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402

from torch_cuda import HAS_CUDA, torch  # noqa: E402


def ints(values):
    return torch.tensor(values, dtype=torch.int32, device="cuda")


def document_reference(offsets, seqlen):
    """(end, start) [B, N] of the segment holding each position, per offsets row."""
    positions = torch.arange(seqlen, device=offsets.device)
    segment = torch.searchsorted(offsets.long(), positions.expand(offsets.shape[0], -1),
                                 right=True) - 1
    return offsets.long().gather(1, segment + 1), offsets.long().gather(1, segment)


@unittest.skipUnless(HAS_CUDA, "needs PyTorch and a CUDA device")
class BuildMaskTest(unittest.TestCase):
    def test_ten_token_examples(self):
        text, v = attnjit.build_mask("document", 10, offsets=ints([[0, 4, 7, 10]]))
        self.assertEqual(text, "flashmask(causal=false,columns=2)")
        self.assertEqual(v[0, 0, :, 0].tolist(), [4, 4, 4, 4, 7, 7, 7, 10, 10, 10])
        self.assertEqual(v[0, 0, :, 1].tolist(), [0, 0, 0, 0, 4, 4, 4, 7, 7, 7])
        text, v = attnjit.build_mask("share_question", 10, offsets=ints([[0, 4, 7, 10]]))
        self.assertEqual(text, "flashmask(causal=true,columns=1)")
        self.assertEqual(v[0, 0, :, 0].tolist(), [10, 10, 10, 10, 7, 7, 7, 10, 10, 10])
        text, v = attnjit.build_mask("causal_blockwise", 10, offsets=ints([[0, 4, 7, 10]]),
                                     test=ints([3]))
        self.assertEqual(text, "flashmask(causal=true,columns=2)")
        self.assertEqual(v[0, 0, :, 0].tolist(), [4, 4, 4, 4, 7, 7, 7, 10, 10, 10])
        self.assertEqual(v[0, 0, :, 1].tolist(), [7, 7, 7, 7, 7, 7, 7, 10, 10, 10])

    def test_padded_offsets_on_a_side_stream(self):
        generator = torch.Generator().manual_seed(3)
        seqlen, batch = 1000, 6
        rows = []
        for _ in range(batch):
            count = int(torch.randint(1, 9, (), generator=generator))
            cuts = torch.randint(0, seqlen + 1, (count - 1,), generator=generator).sort().values
            rows.append([0] + cuts.tolist() + [seqlen] * (10 - count))
        offsets = ints(rows)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            _, v = attnjit.build_mask("document", seqlen, offsets=offsets, validate=True)
        stream.synchronize()
        end, start = document_reference(offsets, seqlen)
        self.assertTrue(torch.equal(v[:, 0, :, 0].long(), end))
        self.assertTrue(torch.equal(v[:, 0, :, 1].long(), start))

    def test_bad_offsets_and_vectors_are_named(self):
        with self.assertRaisesRegex(attnjit.AttnjitError, r"offsets\[1\]\[2\]: got '3'"):
            attnjit.build_mask("causal_document", 10, offsets=ints([[0, 5, 10], [0, 4, 3]]),
                               validate=True)
        _, v = attnjit.build_mask("causal_document", 10, offsets=ints([[0, 5, 10], [0, 4, 10]]))
        attnjit.validate_intervals(v, causal=True, seqlen_q=10)
        v[1, 0, 3, 0] = 11
        with self.assertRaises(attnjit.AttnjitError) as caught:
            attnjit.validate_intervals(v, causal=True, seqlen_q=10)
        self.assertEqual(str(caught.exception),
                         "startend_row_indices[batch=1, head=0, column=3] LTS=11 is outside "
                         "[0, 10]; accepted: 0 <= LTS <= 10 (seqlen_q)")

    def test_forward_over_built_vectors(self):
        generator = torch.Generator(device="cuda").manual_seed(5)
        q, k, v = (torch.randn(2, 300, 4, 64, device="cuda", dtype=torch.bfloat16,
                               generator=generator) for _ in range(3))
        offsets = ints([[0, 100, 250, 300], [0, 7, 300, 300]])
        _, built = attnjit.build_mask("causal_document", 300, offsets=offsets)
        end, _ = document_reference(offsets, 300)
        reference = end.to(torch.int32)[:, None, :, None].contiguous()
        o_built = attnjit.forward(q, k, v, mask="flashmask", causal=True,
                                  startend_row_indices=built)
        o_reference = attnjit.forward(q, k, v, mask="flashmask", causal=True,
                                      startend_row_indices=reference)
        self.assertTrue(torch.equal(o_built, o_reference))


if __name__ == "__main__":
    unittest.main()
