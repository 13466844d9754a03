"""attnjit.attention_varlen without PyTorch or a GPU: its argument checks (refused before a
tensor is needed), how FlashAttention's causal and window_size map to the spec's mask, the spec
texts it compiles (predicate masks too), and the C ABI's varlen prepared launch as the package
declares it and as the package prepares it with a predicate's inputs.
"""

import ctypes
import itertools
import math
import re
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402
from attnjit import _ffi, _launch  # noqa: E402
from cache_dir import TemporaryCacheTest  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


SHARED = [0, 1]  # one boundaries object passed as both cu_seqlens_q and cu_seqlens_k


def attention_varlen(**kwargs):
    """attention_varlen with lists for tensors: a call that passes the argument checks stops at
    q (not a torch.Tensor)."""
    arguments = dict(q=[1.0], k=[1.0], v=[1.0], cu_seqlens_q=[0, 1], cu_seqlens_k=[0, 1],
                     max_seqlen_q=1, max_seqlen_k=1)
    arguments.update(kwargs)
    return attnjit.attention_varlen(**arguments)


class Shaped:
    """What _launch._prepare reads of a torch tensor: dtype, rank, shape and strides
    (contiguous)."""

    def __init__(self, dtype, shape):
        self.dtype, self.shape = dtype, shape
        self.strides = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))

    def dim(self):
        return len(self.shape)

    def stride(self):
        return self.strides


class ArgumentTest(unittest.TestCase):
    def test_exported(self):
        self.assertIn("attention_varlen", attnjit.__all__)

    def test_refusals_before_needing_torch(self):
        cases = [
            (ValueError, r"dropout_p: got 0.1; accepted: 0.0", dict(dropout_p=0.1)),
            (ValueError, r"dropout_p: got True", dict(dropout_p=True)),
            (ValueError, r"alibi_slopes: given with boundaries of the keys' own \(another "
                         r"cu_seqlens_k tensor, or seqused_k\); accepted: None, or shared "
                         r"boundaries \(one tensor passed as both cu_seqlens_q and "
                         r"cu_seqlens_k, seqused_k None\)", dict(alibi_slopes=[0.5])),
            (ValueError, r"alibi_slopes: given with boundaries of the keys' own",
             dict(alibi_slopes=[0.5], cu_seqlens_q=SHARED, cu_seqlens_k=SHARED, seqused_k=[1])),
            (TypeError, "q: expected a torch.Tensor",
             dict(alibi_slopes=[0.5], cu_seqlens_q=SHARED, cu_seqlens_k=SHARED)),
            (ValueError, r"window_size: got \(64, -1\) with startend_row_indices; accepted: "
                         r"\(-1, -1\) \(the vectors say the mask; causal=True makes it a causal "
                         r"FlashMask\)", dict(startend_row_indices=[[0]], window_size=(64, -1))),
            (ValueError, r"window_size: got \(-1, 0\) with startend_row_indices",
             dict(startend_row_indices=[[0]], window_size=(-1, 0))),
            (TypeError, "startend_row_indices: expected a torch.Tensor, got list",
             dict(startend_row_indices=[[0]], causal=True)),
            (TypeError, "causal: expected a bool, got int", dict(causal=1)),
            (TypeError, "deterministic: expected a bool", dict(deterministic="yes")),
            (TypeError, "return_lse: expected a bool", dict(return_lse=None)),
            (TypeError, r"window_size: expected a pair of ints \(left, right\), got \(1,\)",
             dict(window_size=(1,))),
            (TypeError, "window_size: expected a pair of ints", dict(window_size=(1.0, 2))),
            (TypeError, "window_size: expected a pair of ints", dict(window_size=(True, 2))),
            (ValueError, r"window_size: got \(-2, 0\); accepted: sizes >= 0, or -1",
             dict(window_size=(-2, 0))),
            (attnjit.AttnjitError, r"window_size\[0\]: got 4294967296",
             dict(window_size=(2**32, 0))),
            (ValueError, r"softmax_scale: got -1.0; accepted: a finite number > 0, or None",
             dict(softmax_scale=-1.0)),
            (ValueError, r"softcap: got -5.0", dict(softcap=-5.0)),
            (ValueError, r"softcap: got nan", dict(softcap=float("nan"))),
            (TypeError, r"softcap: expected a float or None, got bool", dict(softcap=False)),
            (TypeError, r"max_seqlen_q: expected a Python int, got float \(a tensor would make "
                        r"the host wait for its value\)", dict(max_seqlen_q=1.0)),
            (TypeError, r"max_seqlen_k: expected a Python int, got bool", dict(max_seqlen_k=True)),
            (attnjit.AttnjitError, r"max_seqlen_q: got -1; accepted: an int from 0 to",
             dict(max_seqlen_q=-1)),
            (attnjit.AttnjitError, r"max_seqlen_k: got 2147483648", dict(max_seqlen_k=2**31)),
            (TypeError, "q: expected a torch.Tensor", dict()),
            (TypeError, "q: expected a torch.Tensor",
             dict(causal=True, window_size=(64, -1), softcap=0.0, softmax_scale=0.125,
                  deterministic=True, return_lse=True)),
            (TypeError, "q: expected a torch.Tensor", dict(softcap=None, dropout_p=0)),
        ]
        cases += self.predicate_cases()
        for error, message, kwargs in cases:
            with self.subTest(**{key: repr(value) for key, value in kwargs.items()}):
                with self.assertRaisesRegex(error, message):
                    attention_varlen(**kwargs)

    def predicate_cases(self):
        """A predicate mask goes alone, is an element predicate, and passes the checks that
        need no tensor (then stops at q)."""
        element = attnjit.predicate("q >= k && k < lim[b]", tensors={"lim": None})
        alone = r"^mask: a predicate with causal/startend_row_indices/window_size; accepted: " \
                r"a predicate alone \(it says the whole mask\)$"
        language = (r"accepted: None, or an element predicate over b, h, q, k \(attnjit.predicate"
                    r" of one predicate: no families, & or \|, which the host builds for a "
                    r"padded batch's sizes, while a packed batch's lengths stay on the device\); "
                    r"causal, window_size and startend_row_indices say the other masks$")
        return [
            (ValueError, r"^mask: got 'causal'; " + language, dict(mask="causal")),
            (ValueError, r"^mask: got PredicateMask\('document\(\[4,3,3\]\) \| sliding_window"
                         r"\(2\)', .*" + language,
             dict(mask=attnjit.predicate("document([4,3,3]) | sliding_window(2)"))),
            (ValueError, r"^mask: got FlashMask\(", dict(
                mask=attnjit.flashmask("causal_document", seqlen=4, doc_lengths=[2, 2]))),
            (ValueError, alone, dict(mask=element, causal=True)),
            (ValueError, alone, dict(mask=element, window_size=(-1, 0))),
            (ValueError, alone, dict(mask=element, window_size=[8, 8])),
            (ValueError, alone, dict(mask=element, startend_row_indices=[[0]])),
            (TypeError, r"window_size: expected a pair of ints",
             dict(mask=element, window_size=None)),
            (ValueError, r"^sinks: given with a predicate mask; accepted: None",
             dict(mask=element, sinks=[0.0])),
            (ValueError, r"alibi_slopes: given with boundaries of the keys' own",
             dict(mask=element, alibi_slopes=[0.5])),
            (TypeError, "q: expected a torch.Tensor", dict(mask=element)),
            (TypeError, "q: expected a torch.Tensor", dict(
                mask=element, window_size=[-1, -1], alibi_slopes=[0.5], cu_seqlens_q=SHARED,
                cu_seqlens_k=SHARED, softcap=1.5, softmax_scale=0.125, deterministic=True,
                return_lse=True)),
        ]

    def test_causal_and_window_size_as_flash_attention_reads_them(self):
        for causal, window_size, expected in (
                (False, (-1, -1), ("none", -1, 0)),
                (True, (-1, -1), ("causal", -1, 0)),
                (False, (-1, 0), ("causal", -1, 0)),
                (True, (128, -1), ("sliding_window", 128, 0)),
                (True, (128, 7), ("sliding_window", 128, 0)),  # causal: the right side is 0
                (False, (128, 7), ("sliding_window", 128, 7)),
                (False, (-1, 5), ("sliding_window", -1, 5)),
                (False, (0, 0), ("sliding_window", 0, 0)),
                (False, [3, -1], ("sliding_window", 3, -1))):
            with self.subTest(causal=causal, window_size=window_size):
                self.assertEqual(attnjit._varlen_mask(causal, window_size), expected)


class SpecTest(TemporaryCacheTest):
    def spec(self, mask, softcap=False, backward=False, deterministic=False):
        return _launch.spec_text("torch.bfloat16", 128, 128, mask, False, 0, not backward,
                                 softcap, False, backward, deterministic, varlen="true")

    def test_the_spec_texts_compile_without_a_device(self):
        for mask in ("none", "causal", "sliding_window"):
            for backward in (False, True):
                with self.subTest(mask=mask, backward=backward):
                    kernel = attnjit.compile(self.spec(mask, softcap=mask == "causal",
                                                       backward=backward,
                                                       deterministic=backward) + " target=sm_80")
                    words = kernel.spec.split()
                    self.assertIn("varlen=true", words)
                    self.assertIn(f"mask={mask}", words)
                    self.assertEqual("direction=backward" in words, backward)
                    if backward:
                        self.assertIn("deterministic=true", words)
        # The padded calls' specs stay without varlen.
        self.assertNotIn("varlen", _launch.spec_text("torch.bfloat16", 128, 128, "causal",
                                                     False, 0, True, False, False))

    def test_shared_boundaries_compile_their_own_spec(self):
        text = _launch.spec_text("torch.bfloat16", 128, 128, "causal", False, 0, True, False,
                                 False, varlen="shared")
        self.assertTrue(text.endswith(" varlen=shared"))
        self.assertIn("varlen=shared", attnjit.compile(text + " target=sm_80").spec.split())

    def test_alibi_is_refused_with_varlen_true_only(self):
        with self.assertRaisesRegex(attnjit.AttnjitError, "varlen"):
            attnjit.compile("dtype=bf16 head_dim=128 mask=causal varlen=true alibi=true "
                            "target=sm_80")
        for backward in (False, True):
            text = _launch.spec_text("torch.bfloat16", 128, 128, "causal", False, 0,
                                     not backward, False, True, backward, varlen="shared")
            self.assertIn("alibi=true", attnjit.compile(text + " target=sm_80").spec.split())

    def test_flashmask_specs_of_every_arity_compile(self):
        # The spec attention_varlen builds with startend_row_indices: the vectors' causal flag
        # and their column count; each arity's forward with varlen=true, its backward shared.
        for (causal, columns), (backward, layout) in itertools.product(
                ((True, 1), (True, 2), (False, 2), (False, 4)),
                ((False, "true"), (True, "shared"))):
            with self.subTest(causal=causal, columns=columns, varlen=layout, backward=backward):
                text = _launch.spec_text("torch.float16", 64, 64, "flashmask", causal, columns,
                                         not backward, False, False, backward, False,
                                         varlen=layout)
                words = attnjit.compile(text + " target=sm_80").spec.split()
                self.assertIn(f"mask=flashmask(causal={str(causal).lower()},columns={columns})",
                              words)
                self.assertIn(f"varlen={layout}", words)


    def test_predicate_specs_compile_for_both_families(self):
        # The spec attention_varlen builds with a predicate mask (its lifted structure), every
        # modifier the call takes with it, forward and deterministic backward.
        mask = attnjit.predicate("q >= k && k < lim[b]", tensors={"lim": None})
        self.assertEqual(mask.mask_text, "predicate(q>=k&&k<lim[b])")
        for target, (layout, alibi), backward in itertools.product(
                ("sm_80", "sm_90a"), (("true", False), ("shared", True)), (False, True)):
            with self.subTest(target=target, varlen=layout, backward=backward):
                text = _launch.spec_text("torch.bfloat16", 128, 128, mask.mask_text, False, 0,
                                         not backward, True, alibi, backward, backward,
                                         varlen=layout)
                kernel = attnjit.compile(text + f" target={target}")
                words = kernel.spec.split()
                self.assertIn("mask=predicate(q>=k&&k<lim[b])", words)
                self.assertIn(f"varlen={layout}", words)
                self.assertIn(f"alibi={str(alibi).lower()}", words)
                self.assertTrue(any("varlen" in k["name"] and "predicate" in k["name"]
                                    for k in kernel.info()["kernels"]), kernel.info()["kernels"])


class SharedBoundariesTest(unittest.TestCase):
    def test_one_object_without_seqused_k(self):
        boundaries = [0, 4]
        self.assertTrue(attnjit._shared_boundaries(boundaries, boundaries, None))
        self.assertFalse(attnjit._shared_boundaries(boundaries, boundaries, [4]))
        self.assertFalse(attnjit._shared_boundaries(boundaries, [0, 4], None))


class PreparedLaunchTest(TemporaryCacheTest):
    """The varlen entry point through the package's ctypes declarations, with fake pointers."""

    FORWARD = "dtype=bf16 head_dim=64 mask=causal return_lse=true varlen=true target=sm_80"

    def assert_user_error(self, status, message):
        self.assertEqual(status, _ffi.USER_ERROR)
        self.assertEqual(_ffi.lib.attnjit_last_error().decode(), message)

    def slots(self, cu_dtype=_ffi.INT32):
        def packed(total, heads):
            return _ffi.Tensor(None, _ffi.BF16, 3, (total, heads, 64, 0),
                               (heads * 64, 64, 1, 0))

        boundaries = _ffi.Tensor(None, cu_dtype, 1, (3, 0, 0, 0), (1, 0, 0, 0))
        lse = _ffi.Tensor(None, _ffi.FP32, 2, (4, 100, 0, 0), (100, 1, 0, 0))
        absent = _ffi.Tensor()
        return (_ffi.Tensor * _ffi.SLOT_COUNT)(
            packed(100, 4), packed(120, 2), packed(120, 2), packed(100, 4), lse,
            *[absent] * 6, boundaries, boundaries, absent)

    def test_constants_match_the_header(self):
        header = (REPO / "include/attnjit/attnjit.h").read_text()
        constants = {name: int(value) for name, value in
                     re.findall(r"\b(ATTNJIT_SLOT_\w+) = (\d+)", header)}
        self.assertEqual(constants["ATTNJIT_SLOT_COUNT"], _ffi.SLOT_COUNT)
        self.assertEqual(constants["ATTNJIT_SLOT_COUNT_PADDED"], _ffi.SLOT_COUNT_PADDED)
        self.assertEqual(constants["ATTNJIT_SLOT_COUNT_VARLEN"], _ffi.SLOT_COUNT_VARLEN)
        for name in ("sinks", "d_sinks", "q_descale", "k_descale", "v_descale"):
            self.assertEqual(constants[f"ATTNJIT_SLOT_{name.upper()}"],
                             _launch._SLOT_NAMES.index(name))
        self.assertEqual(constants["ATTNJIT_SLOT_CU_SEQLENS_Q"],
                         _launch._SLOT_NAMES.index("cu_seqlens_q"))
        self.assertEqual(constants["ATTNJIT_SLOT_SEQUSED_K"],
                         _launch._SLOT_NAMES.index("seqused_k"))
        self.assertEqual(len(_launch._SLOT_NAMES), _ffi.SLOT_COUNT)

    def test_prepare_and_run_checks(self):
        lib = _ffi.lib
        kernel = attnjit.compile(self.FORWARD)
        handle = ctypes.c_void_p()
        self.assert_user_error(
            lib.attnjit_launch_prepare(kernel._handle, self.slots(), _ffi.SLOT_COUNT, None, 0.0,
                                       -1, 0, 0.0, -1, ctypes.byref(handle)),
            "kernel: got 'a spec with varlen=true'; accepted: a spec with varlen=false (a packed "
            "batch's launch is prepared with attnjit_launch_prepare_varlen, which takes "
            "max_seqlen_q and max_seqlen_k)")
        for max_seqlens, message in (
                ((101, 60), "max_seqlen_q: got '101'; accepted: 0 to 100 (total_q): the longest "
                            "query sequence or more"),
                ((60, -1), "max_seqlen_k: got '-1'; accepted: 0 to 120 (total_k): the longest "
                           "key sequence or more")):
            with self.subTest(max_seqlens=max_seqlens):
                self.assertEqual(lib.attnjit_launch_prepare_varlen(
                    kernel._handle, self.slots(), _ffi.SLOT_COUNT, None, 0.0, -1, 0, 0.0,
                    *max_seqlens, -1, ctypes.byref(handle)), _ffi.OK)
                data = (ctypes.c_void_p * _ffi.SLOT_COUNT)(
                    *[0x10000] * 5, *[None] * 6, 0x20000, 0x30000, None, None, None)
                self.assert_user_error(lib.attnjit_launch_run(handle, data, _ffi.SLOT_COUNT,
                                                              None), message)
                lib.attnjit_launch_release(handle)
        self.assertEqual(lib.attnjit_launch_prepare_varlen(
            kernel._handle, self.slots(_ffi.FP32), _ffi.SLOT_COUNT, None, 0.0, -1, 0, 0.0, 60, 60,
            -1, ctypes.byref(handle)), _ffi.OK)
        data = (ctypes.c_void_p * _ffi.SLOT_COUNT)(*[0x10000] * 5, *[None] * 6, 0x20000, 0x30000)
        self.assert_user_error(lib.attnjit_launch_run(handle, data, _ffi.SLOT_COUNT, None),
                               "cu_seqlens_q.dtype: got 'fp32'; accepted: int32")
        lib.attnjit_launch_release(handle)

    def test_the_package_prepares_a_packed_predicate(self):
        # _launch._prepare binds the varlen slots, max_seqlen_q/k and a predicate's (names,
        # scalars, tensors): a run with one pointer per slot and per predicate tensor reaches
        # the predicate's check of its rows against the packed batch's two sequences.
        kernel = attnjit.compile("dtype=bf16 head_dim=64 mask=predicate(q>=k&&k<lim[b]) "
                                 "return_lse=true varlen=true target=sm_80")

        def packed(total, heads):
            return Shaped("bfloat16", (total, heads, 64))

        boundaries = Shaped("int32", (3,))
        slots = (packed(100, 4), packed(120, 2), packed(120, 2), packed(100, 4),
                 Shaped("float32", (4, 100))) + (None,) * 6 + (boundaries, boundaries)
        predicate = (["lim"], [], [Shaped("int32", (3, 2))])
        launch = _launch._prepare(kernel, slots, predicate, (0.0, -1, 0, 0.0), -1, (60, 70))
        data = (ctypes.c_void_p * (_ffi.SLOT_COUNT + 1))(
            *[0x10000] * 5, *[None] * 6, 0x20000, 0x30000, None, None, None,
            *[None] * (_ffi.SLOT_COUNT - 16), 0x40000)
        count = _ffi.SLOT_COUNT
        self.assert_user_error(_ffi.lib.attnjit_launch_run(launch.handle, data, count, None),
                               f"data_count: got '{count}'; accepted: {count + 1} ({count} slots "
                               "and 1 predicate tensors)")
        self.assert_user_error(_ffi.lib.attnjit_launch_run(launch.handle, data,
                                                           _ffi.SLOT_COUNT + 1, None),
                               "predicate tensor 'lim' shape[0] (rows): got '3'; accepted: 1 "
                               "(shared by every sequence) or 2 (one per sequence of the packed "
                               "batch)")


if __name__ == "__main__":
    unittest.main()
