"""The mask objects of the Python binding without PyTorch or a GPU: attnjit.predicate and
attnjit.flashmask take the mask language (families, & and |), attnjit.forward and
attnjit.attention take every mask object (their argument checks run before they need PyTorch),
reprs, type hints, and a compiled Kernel's PTX and predicate scalars.

Run: python3 -m unittest discover -s tools/python/tests (ATTNJIT_LIBRARY may name the library).
"""

import inspect
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402
from cache_dir import TemporaryCacheTest  # noqa: E402

UNION = "document([4,3,3]) | sliding_window(2)"


def values(x):
    return x.tolist() if hasattr(x, "tolist") else x


class MaskLanguageTest(unittest.TestCase):
    def test_predicate_takes_families_and_unions(self):
        mask = attnjit.predicate(UNION)
        self.assertTrue(mask.language)
        self.assertEqual((mask.form, mask.mask_text),
                         ("predicate", "predicate(_doc0[q]==_doc0[k]||q>=k&&q-k<$0)"))
        self.assertEqual(mask.scalars, [2])
        built = mask.build(batch=1, seqlen_q=10)
        self.assertIsInstance(built, attnjit.PredicateMask)
        self.assertFalse(built.language)
        self.assertEqual(built.structure, "_doc0[q]==_doc0[k]||q>=k&&q-k<$0")
        self.assertEqual(built.tensors, {"_doc0": [[0, 0, 0, 0, 1, 1, 1, 2, 2, 2]]})
        self.assertIs(mask.build(batch=1, seqlen_q=10), built)
        self.assertIsNot(mask.build(batch=2, seqlen_q=10), built)
        # A combination FlashMask holds builds into one; so does a family alone.
        document = attnjit.predicate("document([4,3,3]) & sliding_window(2)").build(1, 10)
        self.assertIsInstance(document, attnjit.FlashMask)
        self.assertEqual(document.mask_text, "flashmask(causal=true,columns=1)")
        self.assertEqual(values(document.startend_row_indices)[0][0],
                         [[2], [3], [4], [4], [6], [7], [7], [9], [10], [10]])
        causal = attnjit.predicate("causal").build(1, 10)
        self.assertEqual((causal.kind, causal.startend_row_indices), ("causal", None))
        # An element predicate alone is itself at any size.
        element = attnjit.predicate("q >= k")
        self.assertFalse(element.language)
        self.assertIs(element.build(4, 100, 200), element)

    def test_language_tensors_are_host_values(self):
        mask = attnjit.predicate("causal_document(len) | sliding_window(2)",
                                 tensors={"len": [[2, 4], [6, 0]]})
        built = mask.build(batch=2, seqlen_q=6)
        self.assertEqual(built.tensors["_doc0"], [[0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]])
        with self.assertRaisesRegex(ValueError, r"exactly the tensors the predicate reads, "
                                                r"\['len'\]"):
            attnjit.predicate("causal_document(len) | sliding_window(2)", tensors={})
        with self.assertRaisesRegex(TypeError, r"tensors\['len'\]: expected a list of ints"):
            attnjit.predicate("causal_document(len) | full", tensors={"len": 3}).build(1, 6)
        with self.assertRaisesRegex(attnjit.AttnjitError, "rows of one length"):
            attnjit.predicate("causal_document(len) | full",
                              tensors={"len": [[1, 2], [3]]}).build(2, 3)
        # The library's checks: sizes that do not match the family.
        with self.assertRaisesRegex(attnjit.AttnjitError, "document"):
            attnjit.predicate(UNION).build(batch=1, seqlen_q=12)

    def test_errors_name_the_position(self):
        with self.assertRaisesRegex(attnjit.AttnjitError, "line 1 column 20"):
            attnjit.predicate("document([4,3,3]) |")
        with self.assertRaisesRegex(attnjit.AttnjitError, "document"):
            attnjit.predicate("document(4) | causal")

    def test_flashmask_takes_an_expression_of_the_interval_form(self):
        by_name = attnjit.flashmask("document", seqlen=10, doc_lengths=[4, 3, 3], heads=2)
        by_text = attnjit.flashmask("document([4,3,3])", seqlen=10, heads=2)
        self.assertEqual(by_text.mask_text, by_name.mask_text)
        self.assertEqual(values(by_text.startend_row_indices),
                         values(by_name.startend_row_indices))
        self.assertEqual(by_text.visible_pairs(heads=2), by_name.visible_pairs(heads=2))
        tensors = attnjit.flashmask("causal_document(len)", seqlen=6, batch=2,
                                    tensors={"len": [[2, 4], [6, 0]]})
        self.assertEqual(values(tensors.startend_row_indices)[1][0], [[6]] * 6)
        self.assertEqual(attnjit.flashmask("q >= k", seqlen=6).kind, "causal")
        with self.assertRaisesRegex(attnjit.AttnjitError, "needs the predicate form"):
            attnjit.flashmask(UNION, seqlen=10)
        with self.assertRaisesRegex(attnjit.AttnjitError, "accepted: tensors= only"):
            attnjit.flashmask("document([4,3,3])", seqlen=10, doc_lengths=[4, 3, 3])
        with self.assertRaisesRegex(attnjit.AttnjitError, "family: got 'documnet'; accepted: "
                                                          "full, causal"):
            attnjit.flashmask("documnet", seqlen=10)

    def test_reprs(self):
        self.assertEqual(repr(attnjit.flashmask("document", seqlen=10, doc_lengths=[4, 3, 3])),
                         "FlashMask('document', seqlen=10, batch=1, heads=1, "
                         "mask='flashmask(causal=false,columns=2)')")
        self.assertEqual(repr(attnjit.predicate("q - k < 256")),
                         "PredicateMask('q - k < 256', mask='predicate(q-k<$0)', scalars=[256], "
                         "tensors=[])")


class CallArgumentsTest(unittest.TestCase):
    """forward and attention take every mask object; their checks need no PyTorch."""

    def masks(self):
        return [attnjit.predicate("q >= k && q - k < 256"), attnjit.predicate(UNION),
                attnjit.flashmask("document", seqlen=10, doc_lengths=[4, 3, 3])]

    def test_mask_objects_reach_the_tensor_checks(self):
        for function in (attnjit.forward, attnjit.attention):
            for mask in self.masks():
                with self.subTest(function=function.__name__, mask=mask):
                    with self.assertRaisesRegex(TypeError, "q: expected a torch.Tensor"):
                        function([1.0], [1.0], [1.0], mask=mask)

    def test_a_predicate_goes_alone(self):
        mask = attnjit.predicate("q >= k")
        for function in (attnjit.forward, attnjit.attention):
            for kwargs in ({"causal": True}, {"window": (4, 0)},
                           {"startend_row_indices": [1]}):
                with self.subTest(function=function.__name__, **kwargs):
                    with self.assertRaisesRegex(ValueError, "a predicate alone"):
                        function([1.0], [1.0], [1.0], mask=mask, **kwargs)
        with self.assertRaisesRegex(ValueError, "spec: given together with a predicate mask"):
            attnjit.forward([1.0], [1.0], [1.0], mask=mask, spec="dtype=bf16 head_dim=64")
        with self.assertRaisesRegex(TypeError, "return_lse: expected a bool"):
            attnjit.forward([1.0], [1.0], [1.0], mask=mask, return_lse=1)

    def test_other_masks_are_named(self):
        with self.assertRaisesRegex(ValueError, r"accepted: none, causal, sliding_window, "
                                                r"flashmask, or a mask object"):
            attnjit.forward([1.0], [1.0], [1.0], mask=object())


class KernelTest(TemporaryCacheTest):
    def test_ptx_repr_and_predicate_scalars(self):
        kernel = attnjit.compile("dtype=bf16 head_dim=64 mask=predicate(q>=k&&(q-k)<256) "
                                 "target=sm_80")
        info = kernel.info()
        self.assertIn("mask=predicate(q>=k&&q-k<$0)", info["spec"].split())
        self.assertEqual(info["predicate_scalars"], [256])
        ptx = kernel.ptx()
        self.assertEqual(len(ptx), len(info["kernels"]))
        for text, described in zip(ptx, info["kernels"]):
            self.assertIn(".target sm_80", text)
            self.assertIn(f".entry {described['name']}(", text)
        self.assertEqual(repr(kernel), f"Kernel({info['spec']!r}, kernels="
                                       f"{[k['name'] for k in info['kernels']]})")
        # Other literals, the same kernels.
        other = attnjit.Kernel.compile("dtype=bf16 head_dim=64 "
                                       "mask=predicate(q>=k&&(q-k)<512) target=sm_80")
        self.assertEqual(other.info()["key"], info["key"])
        self.assertEqual(other.info()["predicate_scalars"], [512])


class TypeHintsTest(unittest.TestCase):
    def test_public_functions_are_annotated(self):
        for name in attnjit.__all__:
            value = getattr(attnjit, name)
            if not inspect.isfunction(value):
                continue
            with self.subTest(function=name):
                signature = inspect.signature(value)
                self.assertIsNot(signature.return_annotation, inspect.Signature.empty)
                for parameter in signature.parameters.values():
                    self.assertIsNot(parameter.annotation, inspect.Parameter.empty,
                                     parameter.name)


if __name__ == "__main__":
    unittest.main()
