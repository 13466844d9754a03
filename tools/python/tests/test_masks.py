"""attnjit.build_mask / attnjit.validate_intervals at the ctypes level: the struct layout, the
families, and the argument checks of the C ABI and of the Python layer. Needs neither PyTorch
nor a GPU: every call below fails its checks before anything touches a device.

Run: python3 -m unittest discover -s tools/python/tests (ATTNJIT_LIBRARY may name the library).
"""

import ctypes
import re
import sys
import unittest
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parents[1]
sys.path.insert(0, str(PYTHON_DIR))

import attnjit  # noqa: E402
from attnjit import _ffi, masks  # noqa: E402

# (causal, columns) per family: the first rows with vectors of the family table, in order
# (families added to the table follow them).
STRUCTURES = {
    "sliding_window": (True, 1), "causal_document": (True, 1), "document": (False, 2),
    "share_question": (True, 1), "global_sliding_window": (False, 4),
    "causal_blockwise": (True, 2), "prefix_lm_causal": (False, 2),
    "prefix_lm_document": (False, 2), "qk_sparse": (True, 2), "random_eviction": (True, 1),
}


def int32_tensor(address, shape):
    """A descriptor of a contiguous int32 tensor at a fake device address."""
    strides, stride = [], 1
    for extent in reversed(shape):
        strides.insert(0, stride)
        stride *= extent
    padding = [0] * (4 - len(shape))
    return _ffi.Tensor(address, _ffi.INT32, len(shape), (ctypes.c_int64 * 4)(*shape, *padding),
                       (ctypes.c_int64 * 4)(*strides, *padding))


def build_args(family, **fields):
    args = masks.MaskBuildArgs()
    args.family = family.encode()
    for name in masks._INT_FIELDS:
        setattr(args, name, -1)
    for name, value in fields.items():
        setattr(args, name, value)
    return args


class MaskAbiTest(unittest.TestCase):
    def last_error(self):
        return _ffi.lib.attnjit_last_error().decode()

    def test_struct_matches_the_header(self):
        header = (REPO / "include/attnjit/attnjit.h").read_text()
        body = re.search(r"typedef struct attnjit_mask_build_args \{(.*?)\}", header, re.S)
        declared = re.findall(r"^\s*[\w ]+?[\s*]+(\w+);", body.group(1), re.M)
        self.assertEqual(declared, [name for name, _ in masks.MaskBuildArgs._fields_])
        self.assertEqual(masks.MaskBuildArgs.offsets.offset, 8)
        self.assertEqual(masks.MaskBuildArgs.seed.offset, 504)
        self.assertEqual(ctypes.sizeof(masks.MaskBuildArgs), 520)

    def test_families_and_structures(self):
        self.assertEqual(attnjit.FAMILIES[:len(STRUCTURES)], tuple(STRUCTURES))
        for family, structure in STRUCTURES.items():
            with self.subTest(family=family):
                self.assertEqual(attnjit.mask_family(family), structure)
        with self.assertRaises(attnjit.AttnjitError) as caught:
            attnjit.mask_family("causal")
        self.assertEqual(str(caught.exception),
                         "family: got 'causal'; accepted: " + ", ".join(attnjit.FAMILIES))
        causal = ctypes.c_int()
        self.assertEqual(_ffi.lib.attnjit_mask_family(b"document", ctypes.byref(causal), None),
                         _ffi.USER_ERROR)
        self.assertIn("columns: got 'NULL'", self.last_error())

    def test_build_rejects_bad_arguments_on_the_host(self):
        build = _ffi.lib.attnjit_mask_build
        out = int32_tensor(0x10000, (2, 1, 64, 1))
        self.assertEqual(build(None, ctypes.byref(out), None), _ffi.USER_ERROR)
        self.assertIn("args: got 'NULL'", self.last_error())
        args = build_args("causal_document", offsets=int32_tensor(0x20000, (2, 4)))
        self.assertEqual(build(ctypes.byref(args), None, None), _ffi.USER_ERROR)
        self.assertIn("startend_row_indices: got 'NULL'", self.last_error())
        cases = [
            (build_args("causal"), "family: got 'causal'"),
            (build_args("causal_document"), "offsets: data is null"),
            (build_args("causal_document", offsets=int32_tensor(0x20000, (3, 4))),
             "offsets.shape[0]: got '3'; accepted: 2"),
            (build_args("causal_document", offsets=int32_tensor(0x20000, (2, 4)), window=4),
             "window: got '4', but causal_document does not read it"),
            (build_args("sliding_window", window=0), "window: got '0'; accepted: >= 1"),
            (build_args("sliding_window", window=3, offsets=int32_tensor(0x20000, (2, 4))),
             "offsets: given, but sliding_window does not read it"),
            (build_args("document", offsets=int32_tensor(0x20000, (2, 4))),
             "startend_row_indices.shape[3] (columns): got '1'; accepted: 2"),
            (build_args("random_eviction", seed=3, prefix=int32_tensor(0x30000, (2,))),
             "prefix: given, but random_eviction does not read it"),
            (build_args("prefix_lm_causal", prefix=_ffi.Tensor(0x30000, 9, 1)),
             "prefix.dtype: got '9'"),
        ]
        for args, message in cases:
            with self.subTest(message=message):
                self.assertEqual(build(ctypes.byref(args), ctypes.byref(out), None),
                                 _ffi.USER_ERROR)
                self.assertIn(message, self.last_error())

    def test_validate_intervals_rejects_bad_arguments_on_the_host(self):
        validate = _ffi.lib.attnjit_validate_intervals
        good = int32_tensor(0x10000, (2, 1, 64, 2))
        self.assertEqual(validate(None, 1, 2, 64, None), _ffi.USER_ERROR)
        self.assertIn("startend_row_indices: got 'NULL'", self.last_error())
        self.assertEqual(validate(ctypes.byref(good), 2, 2, 64, None), _ffi.USER_ERROR)
        self.assertIn("causal: got '2'; accepted: 0 or 1", self.last_error())
        self.assertEqual(validate(ctypes.byref(good), 1, 4, 64, None), _ffi.USER_ERROR)
        self.assertIn("mask: got 'flashmask(causal=true,columns=4)'", self.last_error())
        self.assertEqual(validate(ctypes.byref(good), 0, 4, 64, None), _ffi.USER_ERROR)
        self.assertIn("startend_row_indices.shape[3]: got '2'; accepted: 4", self.last_error())
        self.assertEqual(validate(ctypes.byref(good), 0, 2, -5, None), _ffi.USER_ERROR)
        self.assertIn("seqlen_q: got '-5'", self.last_error())
        empty = int32_tensor(0x10000, (0, 1, 64, 2))
        self.assertEqual(validate(ctypes.byref(empty), 0, 2, 64, None), _ffi.OK)

    def test_python_checks_arguments_before_needing_torch(self):
        cases = [
            (TypeError, "family", dict(family=3)),
            (attnjit.AttnjitError, "family: got 'bogus'", dict(family="bogus")),
            (TypeError, "seqlen", dict(seqlen=1.5)),
            (TypeError, "heads", dict(heads="2")),
            (TypeError, "batch", dict(batch=True)),
            (TypeError, "window", dict(window=2.0)),
            (ValueError, "seed", dict(seed=-1)),
            (TypeError, "validate", dict(validate=1)),
            (TypeError, "offsets: expected a torch.Tensor", dict(offsets=[0, 5, 10])),
        ]
        for error, message, kwargs in cases:
            arguments = dict(family="causal_document", seqlen=10)
            arguments.update(kwargs)
            with self.subTest(**{key: repr(value) for key, value in kwargs.items()}):
                with self.assertRaisesRegex(error, message):
                    attnjit.build_mask(arguments.pop("family"), arguments.pop("seqlen"),
                                       **arguments)
        with self.assertRaisesRegex(TypeError, "causal"):
            attnjit.validate_intervals([1], causal=1, seqlen_q=4)
        with self.assertRaisesRegex(TypeError, "seqlen_q"):
            attnjit.validate_intervals([1], causal=True, seqlen_q=None)
        with self.assertRaisesRegex(TypeError, "startend_row_indices: expected a torch.Tensor"):
            attnjit.validate_intervals([1], causal=True, seqlen_q=4)


if __name__ == "__main__":
    unittest.main()
