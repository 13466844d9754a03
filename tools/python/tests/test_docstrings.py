"""Every docstring example of the attnjit package that needs no GPU runs as written, here
without PyTorch or a device (docstrings.py finds them); the examples marked
`# doctest: +GPU` are left to test_docstrings_gpu.py, which runs them on a CUDA device or
reports itself skipped.

Run: python3 -m unittest discover -s tools/python/tests (ATTNJIT_LIBRARY may name the library).
"""

import copy
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docstrings  # noqa: E402
from cache_dir import TemporaryCacheTest  # noqa: E402


class DocstringExamples(TemporaryCacheTest):
    def test_examples_without_a_gpu_run_as_written(self):
        ran = 0
        for test in docstrings.docstring_tests():
            cpu = copy.copy(test)
            cpu.examples = [e for e in test.examples if not docstrings.needs_gpu(e)]
            if not cpu.examples:
                continue
            ran += len(cpu.examples)
            with self.subTest(docstring=test.name):
                self.assertEqual(docstrings.run(cpu), "")
        self.assertGreater(ran, 20)

    def test_the_public_api_has_examples_of_both_kinds(self):
        tests = {test.name: test for test in docstrings.docstring_tests()}
        for name in ("attnjit", "attnjit.Kernel", "attnjit.compile", "attnjit.forward",
                     "attnjit.attention", "attnjit.builders", "attnjit.builders.flashmask",
                     "attnjit.predicates", "attnjit.predicates.predicate"):
            self.assertIn(name, tests)
        gpu = [e for test in tests.values() for e in test.examples if docstrings.needs_gpu(e)]
        self.assertGreater(len(gpu), 5)


if __name__ == "__main__":
    unittest.main()
