"""attnjit.flashmask's mask objects on a CUDA device: attention with a mask object equals
attention with its arguments, and device= places the vectors.

Skipped unless PyTorch and a CUDA device are available.
Run: python3 tools/python/tests/run_tests.py --gpu (ATTNJIT_LIBRARY may name the library).
"""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402

from torch_cuda import HAS_CUDA, torch  # noqa: E402


@unittest.skipUnless(HAS_CUDA, "needs PyTorch and a CUDA device")
class WithTorch(unittest.TestCase):
    def test_mask_object_runs_like_its_arguments(self):
        mask = attnjit.flashmask("share_question", seqlen=300, batch=2,
                                 documents=[[[100, 50, 50], [60, 40]], [[300]]])
        indices = mask.startend_row_indices
        self.assertEqual((indices.dtype, indices.device.type), (torch.int32, "cpu"))
        self.assertEqual(tuple(indices.shape), (2, 1, 300, 1))
        q, k, v = (torch.randn(2, 300, 4, 64, dtype=torch.bfloat16, device="cuda",
                               requires_grad=True) for _ in range(3))
        o = attnjit.attention(q, k, v, mask=mask)
        expected = attnjit.attention(q, k, v, mask="flashmask", causal=True,
                                     startend_row_indices=indices.cuda())
        self.assertTrue(torch.equal(o, expected))
        self.assertTrue(torch.equal(attnjit.forward(q, k, v, mask=mask), expected))
        o.backward(torch.ones_like(o))
        self.assertTrue(all(t.grad is not None for t in (q, k, v)))
        causal = attnjit.attention(q, k, v, mask=attnjit.flashmask("causal", seqlen=300))
        self.assertTrue(torch.equal(causal, attnjit.attention(q, k, v, mask="causal")))

    def test_device_places_the_vectors(self):
        mask = attnjit.flashmask("document", seqlen=8, doc_lengths=[4, 4], device="cuda")
        self.assertEqual(mask.startend_row_indices.device.type, "cuda")
        self.assertEqual(mask.startend_row_indices[0, 0, :, 1].tolist(), [0] * 4 + [4] * 4)



if __name__ == "__main__":
    unittest.main()
