"""Arguments that C cannot hold as Python gives them: text with NUL characters (C would stop
reading at the NUL) or lone surrogates (no UTF-8 form), and ints outside the C int range
(ctypes would wrap them) are refused with AttnjitError, before the library sees them; mask
layouts no spec takes; and the disk cache switch. Needs neither PyTorch nor a GPU.
"""

import os
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402
from attnjit import _ffi, masks  # noqa: E402
from cache_dir import TemporaryCacheTest  # noqa: E402

SPEC = "dtype=bf16 head_dim=64 mask=none target=sm_80"


class NulTest(unittest.TestCase):
    def test_spec_text(self):
        with self.assertRaisesRegex(attnjit.AttnjitError, r"spec: got a NUL character at index 45"):
            attnjit.compile(SPEC + "\0 mask=causal")
        with self.assertRaisesRegex(attnjit.AttnjitError, "NUL"):
            attnjit.compile_reference(SPEC + "\0")

    def test_predicate_text(self):
        with self.assertRaisesRegex(attnjit.AttnjitError, r"expression: got a NUL character"):
            attnjit.predicate("q>=k\0 && 0")

    def test_family_name(self):
        with self.assertRaisesRegex(attnjit.AttnjitError, r"family: got a NUL character"):
            attnjit.mask_family("causal_document\0document")


class IntRangeTest(unittest.TestCase):
    def test_flashmask_sizes(self):
        with self.assertRaisesRegex(attnjit.AttnjitError, r"seqlen: got 4294967304; accepted: an "
                                                          r"int from 1 to 2147483647"):
            attnjit.flashmask("sliding_window", seqlen=2**32 + 8, window=2)
        with self.assertRaisesRegex(attnjit.AttnjitError, "batch: got 4294967297"):
            attnjit.flashmask("causal", seqlen=8, batch=2**32 + 1)
        with self.assertRaisesRegex(attnjit.AttnjitError, "window"):
            attnjit.flashmask("sliding_window", seqlen=8, window=2**32 + 2)
        mask = attnjit.flashmask("sliding_window", seqlen=8, window=2)
        with self.assertRaisesRegex(attnjit.AttnjitError, "heads: got 2147483648"):
            mask.visible_pairs(2**31)

    def test_build_mask_ints(self):
        # Refused before PyTorch or a device is needed.
        with self.assertRaisesRegex(attnjit.AttnjitError, "seqlen: got 1099511627776"):
            attnjit.build_mask("sliding_window", 2**40, window=4)
        with self.assertRaisesRegex(attnjit.AttnjitError, "window: got -2147483649"):
            attnjit.build_mask("sliding_window", 16, window=-2**31 - 1)
        with self.assertRaisesRegex(attnjit.AttnjitError, "seed: got 18446744073709551616"):
            attnjit.build_mask("random_eviction", 16, seed=2**64)
        with self.assertRaisesRegex(attnjit.AttnjitError, "seqlen_q: got 4294967296"):
            attnjit.validate_intervals(None, causal=True, seqlen_q=2**32)
        with self.assertRaises(TypeError):
            masks.build_mask("sliding_window", 16, window=True)

    def test_window(self):
        with self.assertRaisesRegex(attnjit.AttnjitError, r"window\[0\]: got 1099511627776"):
            attnjit._check_window((2**40, 0))
        self.assertEqual(attnjit._check_window((-1, 5)), (-1, 5))

    def test_helpers(self):
        self.assertEqual(_ffi.int_argument("x", _ffi.INT_MAX), 2**31 - 1)
        with self.assertRaises(attnjit.AttnjitError):
            _ffi.int_argument("x", _ffi.INT_MIN - 1)
        with self.assertRaises(TypeError):
            _ffi.int_argument("x", 1.0)
        self.assertEqual(_ffi.text_argument("x", "é"), "é".encode())


class SurrogateTest(unittest.TestCase):
    """A lone surrogate (what os.fsdecode makes of undecodable bytes) has no UTF-8 form."""

    def test_spec_text(self):
        with self.assertRaisesRegex(attnjit.AttnjitError,
                                    r"^spec: got the lone surrogate U\+DC80 at index 28; "
                                    r"accepted: text UTF-8 can encode$"):
            attnjit.compile("dtype=bf16 head_dim=64 mask=\udc80")

    def test_other_texts(self):
        with self.assertRaisesRegex(attnjit.AttnjitError, r"^expression: got the lone surrogate"):
            attnjit.predicate("q >= k && doc\ud800[q] == 1")
        with self.assertRaisesRegex(attnjit.AttnjitError, r"^family: got the lone surrogate"):
            attnjit.mask_family("causal\udfff")
        self.assertIsInstance(attnjit.AttnjitError("x"), ValueError)


class MaskTextTest(unittest.TestCase):
    def test_layouts_of_a_spec(self):
        self.assertEqual(masks.mask_text(True, 1), "flashmask(causal=true,columns=1)")
        self.assertEqual(masks.mask_text(True, 2), "flashmask(causal=true,columns=2)")
        self.assertEqual(masks.mask_text(False, 2), "flashmask(causal=false,columns=2)")
        self.assertEqual(masks.mask_text(False, 4), "flashmask(causal=false,columns=4)")

    def test_refused(self):
        for causal, columns in ((True, 3), (True, 4), (False, 1), (False, 0), (True, -1),
                                (True, 2.0), (False, True)):
            with self.subTest(causal=causal, columns=columns):
                with self.assertRaisesRegex(attnjit.AttnjitError, r"^columns: got .*; accepted: "):
                    masks.mask_text(causal, columns)
        with self.assertRaisesRegex(attnjit.AttnjitError,
                                    r"^columns: got 3; accepted: 1 or 2 for causal=True"):
            masks.mask_text(True, 3)
        with self.assertRaisesRegex(TypeError, r"^causal: expected a bool, got int"):
            masks.mask_text(1, 2)


class MessageTest(unittest.TestCase):
    def test_slots_are_named_in_user_terms(self):
        with self.assertRaises(attnjit.AttnjitError) as caught:
            attnjit.predicate("q<$0")
        message = str(caught.exception)
        self.assertNotIn("lift_literals", message)
        self.assertIn("numbers instead of $N slots", message)

    def test_long_input_is_quoted_short(self):
        for spec in ("dtype=bf16 head_dim=64 mask=" + "x" * 120000,
                     "dtype=bf16 head_dim=64 " + "y" * 120000):
            with self.assertRaises(attnjit.AttnjitError) as caught:
                attnjit.compile(spec)
            self.assertLess(len(str(caught.exception)), 600)
        with self.assertRaises(attnjit.AttnjitError) as caught:
            attnjit.predicate("q >= k && " + "doc[q] == doc[k] && " * 6000 + "@")
        self.assertLess(len(str(caught.exception)), 600)


class DiskCacheModeTest(TemporaryCacheTest):
    def tearDown(self):
        attnjit.set_disk_cache("on")

    def test_modes(self):
        self.assertEqual(attnjit.disk_cache(), "on")
        attnjit.set_disk_cache("off")
        self.assertEqual(attnjit.disk_cache(), "off")
        attnjit.clear_cache(memory=True, disk=False)
        self.assertEqual(attnjit.Kernel.compile(SPEC).info()["cache"], "miss")
        self.assertEqual(os.listdir(self.cache), [])
        with self.assertRaisesRegex(attnjit.AttnjitError, "got 'off'"):
            attnjit.clear_cache(memory=False, disk=True)

        attnjit.set_disk_cache("on")
        attnjit.clear_cache(memory=True, disk=False)
        self.assertEqual(attnjit.Kernel.compile(SPEC).info()["cache"], "miss")
        for name in os.listdir(self.cache):
            if name.endswith(".lock"):
                os.remove(os.path.join(self.cache, name))
        attnjit.set_disk_cache("readonly")
        attnjit.clear_cache(memory=True, disk=False)
        self.assertEqual(attnjit.Kernel.compile(SPEC).info()["cache"], "disk")
        self.assertEqual([name for name in os.listdir(self.cache) if name.endswith(".lock")], [])
        with self.assertRaisesRegex(attnjit.AttnjitError, "mode: got 'sometimes'"):
            attnjit.set_disk_cache("sometimes")


if __name__ == "__main__":
    unittest.main()
