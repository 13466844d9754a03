"""Tests of attnjit.flashmask (the host FlashMask builders through the C ABI); no GPU needed,
and no PyTorch (with PyTorch the vectors come as a tensor, which the tests read back as lists).
test_builders_gpu.py runs attention with a mask object on a CUDA device.

Run: python3 -m unittest discover -s tools/python/tests (ATTNJIT_LIBRARY may name the library).
"""

import ctypes
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402
from attnjit import _ffi, builders  # noqa: E402


def values(mask):
    """The vectors [B][Hm][N][C] as nested lists."""
    indices = mask.startend_row_indices
    return indices.tolist() if hasattr(indices, "tolist") else indices


def column(mask, c, b=0, h=0):
    """Vector c of (sample b, mask head h), column by column."""
    return [col[c] for col in values(mask)[b][h]]


def masked(causal, columns, vector, q, k):
    """FlashMask's rule for one element (flashmask.md's table), seqlen_q == seqlen_k."""
    if causal and k > q:
        return True
    if causal:
        end = vector[1] if columns == 2 else None
        return q >= vector[0] and (end is None or q < end)
    if columns == 2:
        return q >= vector[0] or q < vector[1]
    return vector[0] <= q < vector[1] or vector[2] <= q < vector[3]


class TenTokenExamples(unittest.TestCase):
    """The examples of flashmask.md, through the Python API."""

    def test_document(self):
        mask = attnjit.flashmask("document", seqlen=10, doc_lengths=[4, 3, 3])
        self.assertEqual((mask.kind, mask.causal, mask.columns), ("flashmask", False, 2))
        self.assertEqual(mask.mask_text, "flashmask(causal=false,columns=2)")
        self.assertEqual(column(mask, 0), [4, 4, 4, 4, 7, 7, 7, 10, 10, 10])
        self.assertEqual(column(mask, 1), [0, 0, 0, 0, 4, 4, 4, 7, 7, 7])

    def test_share_question(self):
        mask = attnjit.flashmask("share_question", seqlen=10, documents=[[4, 3, 3]])
        self.assertEqual((mask.kind, mask.causal, mask.columns), ("flashmask", True, 1))
        self.assertEqual(column(mask, 0), [10, 10, 10, 10, 7, 7, 7, 10, 10, 10])

    def test_causal_blockwise(self):
        mask = attnjit.flashmask("causal_blockwise", seqlen=10, blocks=[4, 3], test=3)
        self.assertEqual(mask.mask_text, "flashmask(causal=true,columns=2)")
        self.assertEqual(column(mask, 0), [4, 4, 4, 4, 7, 7, 7, 10, 10, 10])
        self.assertEqual(column(mask, 1), [7, 7, 7, 7, 7, 7, 7, 10, 10, 10])


class Families(unittest.TestCase):
    def test_every_family_has_its_layout(self):
        cases = {
            "full": ({}, "none"),
            "causal": ({}, "causal"),
            "sliding_window": ({"window": 3}, "flashmask(causal=true,columns=1)"),
            "causal_document": ({"doc_lengths": [5, 7]}, "flashmask(causal=true,columns=1)"),
            "document": ({"doc_lengths": [5, 7]}, "flashmask(causal=false,columns=2)"),
            "share_question": ({"documents": [[2, 3], [3, 2, 2]]},
                               "flashmask(causal=true,columns=1)"),
            "global_sliding_window": ({"global_tokens": 2, "left": 3, "right": 1},
                                      "flashmask(causal=false,columns=4)"),
            "causal_blockwise": ({"blocks": [4, 4], "test": 4},
                                 "flashmask(causal=true,columns=2)"),
            "prefix_lm_causal": ({"prefix": 5}, "flashmask(causal=false,columns=2)"),
            "prefix_lm_document": ({"doc_lengths": [6, 6], "prefixes": [2, 0]},
                                   "flashmask(causal=false,columns=2)"),
            "qk_sparse": ({"offset": 3, "length": 4}, "flashmask(causal=true,columns=2)"),
            "random_eviction": ({"evicted_at_row": [12, 5, 9, 12, 4, 12, 12, 8, 12, 12, 11, 12]},
                                "flashmask(causal=true,columns=1)"),
        }
        # The first rows of the family table, in order (families added to it follow).
        self.assertEqual(list(builders.FAMILIES)[:len(cases)], list(cases))
        for family, (parameters, text) in cases.items():
            with self.subTest(family=family):
                mask = attnjit.flashmask(family, seqlen=12, **parameters)
                self.assertEqual(mask.mask_text, text)
                self.assertEqual((mask.family, mask.seqlen, mask.batch, mask.heads),
                                 (family, 12, 1, 1))
                if mask.kind != "flashmask":
                    self.assertIsNone(mask.startend_row_indices)
                    continue
                shape = (len(values(mask)), len(values(mask)[0]), len(values(mask)[0][0]),
                         len(values(mask)[0][0][0]))
                self.assertEqual(shape, (1, 1, 12, mask.columns))

    def test_packed_share_question_offsets_each_sample(self):
        mask = attnjit.flashmask("share_question", seqlen=12, documents=[[2, 3], [3, 2, 2]])
        # Sample 1: question [0, 2) seen until 5, answer [2, 5); sample 2 starts at 5.
        self.assertEqual(column(mask, 0), [5, 5, 5, 5, 5, 12, 12, 12, 10, 10, 12, 12])

    def test_per_sample_parameters_and_heads(self):
        mask = attnjit.flashmask("causal_document", seqlen=6, batch=2, heads=3,
                                 doc_lengths=[[2, 4], [6]])
        self.assertEqual((mask.batch, mask.heads), (2, 3))
        for h in range(3):
            self.assertEqual(column(mask, 0, b=0, h=h), [2, 2, 6, 6, 6, 6])
            self.assertEqual(column(mask, 0, b=1, h=h), [6] * 6)
        shared = attnjit.flashmask("qk_sparse", seqlen=6, batch=2, offset=[1, 2], length=2)
        self.assertEqual(column(shared, 0, b=0), [6, 1, 2, 6, 6, 6])
        self.assertEqual(column(shared, 1, b=1), [6, 6, 4, 4, 6, 6])

    def test_random_eviction_per_head(self):
        rows = [[[3, 3, 3], [1, 3, 2]], [[2, 3, 3], [3, 3, 3]]]
        mask = attnjit.flashmask("random_eviction", seqlen=3, batch=2, heads=2,
                                 evicted_at_row=rows)
        self.assertEqual([[column(mask, 0, b, h) for h in range(2)] for b in range(2)], rows)

    def test_visible_pairs_count_every_visible_element(self):
        masks = [
            attnjit.flashmask("document", seqlen=9, batch=2, doc_lengths=[[4, 5], [9]]),
            attnjit.flashmask("global_sliding_window", seqlen=9, global_tokens=1, left=2,
                              right=1),
            attnjit.flashmask("qk_sparse", seqlen=9, offset=2, length=3),
            attnjit.flashmask("random_eviction", seqlen=4, batch=1, heads=2,
                              evicted_at_row=[[[4, 2, 4, 4], [1, 4, 3, 4]]]),
        ]
        for mask in masks:
            with self.subTest(family=mask.family):
                n = mask.seqlen
                visible = sum(not masked(mask.causal, mask.columns, values(mask)[b][h][k], q, k)
                              for b in range(mask.batch) for h in range(mask.heads)
                              for q in range(n) for k in range(n))
                # Two query heads per mask head.
                self.assertEqual(mask.visible_pairs(2 * mask.heads), 2 * visible)
        self.assertEqual(attnjit.flashmask("causal", seqlen=4, batch=3).visible_pairs(2),
                         3 * 2 * 10)
        self.assertEqual(attnjit.flashmask("full", seqlen=4).visible_pairs(1), 16)
        with self.assertRaisesRegex(attnjit.AttnjitError, "heads: got 0"):
            masks[0].visible_pairs(0)
        with self.assertRaisesRegex(attnjit.AttnjitError, "heads: got 3 query heads for 2"):
            masks[3].visible_pairs(3)


class FamilyTable(unittest.TestCase):
    """The families come from libattnjit's table (attnjit_mask_families), not from Python."""

    def test_python_lists_the_library_table(self):
        from attnjit import _families

        names = [family["name"] for family in _families.TABLE]
        self.assertEqual(list(builders.FAMILIES), names)
        self.assertEqual(names[:2], ["full", "causal"])
        with_vectors = [family for family in _families.TABLE if family["columns"] > 0]
        self.assertEqual(attnjit.FAMILIES, tuple(family["name"] for family in with_vectors))
        for family in with_vectors:
            with self.subTest(family=family["name"]):
                self.assertEqual(attnjit.mask_family(family["name"]),
                                 (family["causal"], family["columns"]))
                self.assertTrue(family["device_parameters"])
        document = next(family for family in _families.TABLE if family["name"] == "document")
        self.assertEqual(document["parameters"], [{"name": "doc_lengths", "depth": 1}])
        self.assertEqual(document["device_parameters"], ["offsets"])

    def test_intervals_family_checks_its_arguments(self):
        out = ctypes.c_void_p(1)
        cases = [
            (b"full", 4, b"{}", "family: got 'full'; accepted: sliding_window, "),
            (b"document", 0, b"{}", "seqlen: got '0'; accepted: >= 1"),
            (b"document", 4, b"[1]", "parameters: got '[1]'; accepted: a JSON object"),
            (b"document", 4, b"{", "parameters: got '{'; accepted: a JSON object"),
            (b"document", 4, b'{"doc_lengths": 1.5}', "doc_lengths: got '1.5'; accepted: an "
                                                      "int32, a list of them"),
            (b"document", 4, b'{"doc_lengths": [4], "window": 1}',
             "document parameters: unknown window; accepted: doc_lengths"),
        ]
        for family, seqlen, parameters, message in cases:
            with self.subTest(message=message):
                self.assertEqual(builders._lib.attnjit_intervals_family(
                    family, seqlen, parameters, None, ctypes.byref(out)), _ffi.USER_ERROR)
                self.assertIsNone(out.value)
                self.assertIn(message, _ffi.lib.attnjit_last_error().decode())
        self.assertEqual(builders._lib.attnjit_intervals_family(
            b"document", 4, b'{"doc_lengths": [2, 2]}', None, ctypes.byref(out)), _ffi.OK)
        builders._Handle(out)


class Errors(unittest.TestCase):
    def test_python_checks_name_the_parameter(self):
        cases = [
            ("family: got 'diagonal'", ("diagonal", 4), {}),
            ("seqlen: got 0", ("full", 0), {}),
            ("batch: got 0", ("full", 4), {"batch": 0}),
            ("sliding_window parameters: missing window; accepted: window", ("sliding_window", 4),
             {}),
            ("document parameters: unknown window; accepted: doc_lengths", ("document", 4),
             {"doc_lengths": [4], "window": 2}),
            ("doc_lengths: sum 5; accepted: seqlen \\(6\\)", ("document", 6),
             {"doc_lengths": [2, 3]}),
            ("doc_lengths: sum 5 \\(sample 1\\)", ("causal_document", 6),
             {"batch": 2, "doc_lengths": [[6], [5]]}),
            ("doc_lengths: got 3 per-sample values; accepted: one per sample \\(batch=2\\)",
             ("document", 2), {"batch": 2, "doc_lengths": [[2], [2], [2]]}),
            ("window: got a list of lists of ints; accepted: an int \\(every sample\\)",
             ("sliding_window", 4), {"window": [[1]]}),
            ("evicted_at_row\\[0\\]: got 1 per-head values; accepted: one per mask head",
             ("random_eviction", 2), {"heads": 2, "evicted_at_row": [[[2, 2]]]}),
            ("evicted_at_row: got 3 values; accepted: seqlen \\(2\\)", ("random_eviction", 2),
             {"evicted_at_row": [2, 2, 2]}),
            ("window: got 4294967296; accepted: an int32 value", ("sliding_window", 4),
             {"window": 1 << 32}),
            ("doc_lengths: got a value outside the int32 range", ("document", 4),
             {"doc_lengths": [1 << 40, 4 - (1 << 40)]}),
            ("documents\\[0\\]: got an empty list", ("share_question", 4), {"documents": [[]]}),
            ("prefixes: got 1; accepted: one per document \\(2\\)", ("prefix_lm_document", 4),
             {"doc_lengths": [2, 2], "prefixes": [1]}),
            ("got str; accepted: ints", ("prefix_lm_causal", 4), {"prefix": "2"}),
        ]
        for message, args, kwargs in cases:
            with self.subTest(message=message):
                with self.assertRaisesRegex(attnjit.AttnjitError, message):
                    attnjit.flashmask(*args, **kwargs)

    def test_builder_checks_come_through_the_c_abi(self):
        cases = [
            ("window: got '0'; accepted: >= 1", "sliding_window", {"window": 0}),
            ("doc_lengths\\[1\\]: got '-1'", "causal_document", {"doc_lengths": [5, -1]}),
            ("global: got '9'; accepted: 0 <= global <= 4", "global_sliding_window",
             {"global_tokens": 9, "left": 1, "right": 1}),
            ("length: got '3'; accepted: 0 <= length <= 2 \\(n - offset\\)", "qk_sparse",
             {"offset": 2, "length": 3}),
            ("prefixes\\[0\\]: got '3'", "prefix_lm_document",
             {"doc_lengths": [2, 2], "prefixes": [3, 0]}),
            ("evicted_at_row\\[1\\]: got '5'", "random_eviction", {"evicted_at_row": [4, 5, 4, 4]}),
            ("answers\\[0\\]: got '-1'", "share_question", {"documents": [[5, -1]]}),
        ]
        for message, family, kwargs in cases:
            with self.subTest(family=family):
                with self.assertRaisesRegex(attnjit.AttnjitError, message):
                    attnjit.flashmask(family, seqlen=4, **kwargs)

    def test_c_abi_rejects_null_and_bad_handles(self):
        lib = builders._lib
        out_p = ctypes.POINTER(ctypes.c_void_p)
        # The typed builders of attnjit.h (flashmask() goes through attnjit_intervals_family).
        typed = {"attnjit_intervals_causal_document": [ctypes.POINTER(ctypes.c_int32),
                                                       ctypes.c_size_t, out_p],
                 "attnjit_intervals_sliding_window": [ctypes.c_int, ctypes.c_int, out_p],
                 "attnjit_intervals_prefix_lm_causal": [ctypes.c_int, ctypes.c_int, out_p]}
        for name, argtypes in typed.items():
            getattr(lib, name).argtypes = argtypes
            getattr(lib, name).restype = ctypes.c_int
        out = ctypes.c_void_p(1)
        self.assertEqual(lib.attnjit_intervals_causal_document(None, 3, ctypes.byref(out)),
                         _ffi.USER_ERROR)
        self.assertIsNone(out.value)
        self.assertIn("doc_lengths: got 'NULL'", _ffi.lib.attnjit_last_error().decode())
        self.assertEqual(lib.attnjit_intervals_sliding_window(4, 2, None), _ffi.USER_ERROR)
        self.assertIn("out: got 'NULL'", _ffi.lib.attnjit_last_error().decode())
        self.assertEqual(lib.attnjit_intervals_broadcast_heads(None, 2, ctypes.byref(out)),
                         _ffi.USER_ERROR)
        self.assertIn("intervals: got 'NULL'", _ffi.lib.attnjit_last_error().decode())
        self.assertFalse(lib.attnjit_intervals_data(None))  # a NULL pointer
        lib.attnjit_intervals_release(None)

        piece = builders._build(lib.attnjit_intervals_sliding_window, 4, 2)
        pair = (ctypes.c_void_p * 2)(piece.value, None)
        self.assertEqual(lib.attnjit_intervals_stack(pair, 2, 1, ctypes.byref(out)),
                         _ffi.USER_ERROR)
        self.assertIn("samples[1]: got 'NULL'", _ffi.lib.attnjit_last_error().decode())
        three = (ctypes.c_void_p * 3)(piece.value, piece.value, piece.value)
        self.assertEqual(lib.attnjit_intervals_stack(three, 3, 2, ctypes.byref(out)),
                         _ffi.USER_ERROR)
        self.assertIn("heads: got '2'; accepted: a divisor >= 1 of the sample count (3)",
                      _ffi.lib.attnjit_last_error().decode())
        other = builders._build(lib.attnjit_intervals_prefix_lm_causal, 4, 1)
        mixed = (ctypes.c_void_p * 2)(piece.value, other.value)
        self.assertEqual(lib.attnjit_intervals_pack(mixed, 2, ctypes.byref(out)),
                         _ffi.USER_ERROR)
        self.assertIn("pack: pieces[1].causal: got false", _ffi.lib.attnjit_last_error().decode())
        self.assertEqual(lib.attnjit_intervals_stack(three, 3, 1, ctypes.byref(out)), _ffi.OK)
        builders._Handle(out)

    def test_attention_takes_the_mask_object(self):
        mask = attnjit.flashmask("causal_document", seqlen=4, doc_lengths=[2, 2])
        with self.assertRaisesRegex(ValueError, "FlashMask given together with causal="):
            attnjit.attention([1.0], [1.0], [1.0], mask=mask, causal=True)
        with self.assertRaisesRegex(ValueError, "startend_row_indices="):
            attnjit.forward([1.0], [1.0], [1.0], mask=mask, startend_row_indices=[0])
        for function in (attnjit.attention, attnjit.forward):
            with self.subTest(function=function.__name__):
                with self.assertRaisesRegex(TypeError, "q: expected a torch.Tensor"):
                    function([1.0], [1.0], [1.0], mask=mask)
        self.assertEqual(mask.attention_arguments(None, False, None),
                         ("flashmask", True, mask.startend_row_indices))
        causal = attnjit.flashmask("causal", seqlen=4)
        self.assertEqual(causal.attention_arguments(None, False, None), ("causal", False, None))


if __name__ == "__main__":
    unittest.main()
