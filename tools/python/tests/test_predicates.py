"""Predicate masks in the Python binding without PyTorch or a GPU: parsing and lifting through
the C ABI, the checks of attnjit.predicate, and compiling a lifted structure.

Run: python3 -m unittest discover -s tools/python/tests (ATTNJIT_LIBRARY may name the library).
"""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402
from cache_dir import TemporaryCacheTest  # noqa: E402


class PredicateTest(TemporaryCacheTest):
    def test_literals_are_lifted_and_tensors_named(self):
        mask = attnjit.predicate("q - k < 256 && doc[q] == doc[k] || k == 7", {"doc": object()})
        self.assertEqual(mask.structure, "q-k<$0&&doc[q]==doc[k]||k==$1")
        self.assertEqual(mask.scalars, [256, 7])
        self.assertEqual(mask.names, ["doc"])
        other = attnjit.predicate("q - k < 512 && doc[q] == doc[k] || k == 9", {"doc": object()})
        self.assertEqual(other.structure, mask.structure)

    def test_errors_name_the_position_and_the_tensors(self):
        with self.assertRaisesRegex(attnjit.AttnjitError, "line 1 column 5: expected an operand"):
            attnjit.predicate("q >=")
        with self.assertRaisesRegex(ValueError, r"accepted: exactly the tensors the predicate "
                                                r"reads, \['doc'\]"):
            attnjit.predicate("doc[q] == doc[k]", {"docs": object()})
        with self.assertRaisesRegex(TypeError, "tensors: expected a dict"):
            attnjit.predicate("q >= k", ["doc"])
        with self.assertRaisesRegex(TypeError, "expression: expected a str"):
            attnjit.predicate(5)

    def test_the_lifted_structure_compiles(self):
        mask = attnjit.predicate("(q / 128 + k / 128) % 2 == 0")
        kernel = attnjit.compile(
            f"dtype=bf16 head_dim=64 mask=predicate({mask.structure}) target=sm_90")
        roles = [k["role"] for k in kernel.info()["kernels"]]
        self.assertEqual(roles, ["predicate_blocks", "cta_order", "forward"])
        # With both score modifiers, as attnjit.attention(mask=predicate, softcap=...,
        # alibi_slopes=...) compiles it.
        kernel = attnjit.compile(f"dtype=bf16 head_dim=64 mask=predicate({mask.structure}) "
                                 "softcap=true alibi=true direction=backward target=sm_90")
        names = [k["name"] for k in kernel.info()["kernels"]]
        self.assertIn("attnjit_bwd_bf16_d64_predicate_softcap_alibi", names)


if __name__ == "__main__":
    unittest.main()
