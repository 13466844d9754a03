"""The docstrings of the attnjit package that hold examples marked `# doctest: +GPU` run as
written on a CUDA device with PyTorch, with the tensors q, k and v of the package docstring
(docstrings.py finds them); skipped, with the reason, without PyTorch or a device.

Run: python3 tools/python/tests/run_tests.py --gpu
"""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docstrings  # noqa: E402
from cache_dir import TemporaryCacheTest  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

HAVE_GPU = torch is not None and torch.cuda.is_available()


@unittest.skipUnless(HAVE_GPU, "the +GPU docstring examples need PyTorch and a CUDA device")
class GpuDocstringExamples(TemporaryCacheTest):
    def test_gpu_examples_run_as_written(self):
        ran = 0
        for test in docstrings.docstring_tests():
            if not any(docstrings.needs_gpu(e) for e in test.examples):
                continue
            ran += 1
            globs = {"torch": torch}
            if test.name != "attnjit":  # the package docstring makes its own
                globs.update(
                    q=torch.randn(2, 1024, 8, 128, device="cuda", dtype=torch.bfloat16),
                    k=torch.randn(2, 1024, 2, 128, device="cuda", dtype=torch.bfloat16),
                    v=torch.randn(2, 1024, 2, 128, device="cuda", dtype=torch.bfloat16))
            with self.subTest(docstring=test.name):
                self.assertEqual(docstrings.run(test, globs), "")
        self.assertGreater(ran, 3)


if __name__ == "__main__":
    unittest.main()
