"""Tests of the Python binding's ctypes layer that need neither PyTorch nor a GPU.

Run: python3 -m unittest discover -s tools/python/tests (ATTNJIT_LIBRARY may name the library).
Kernels are compiled for an explicit target=sm_90, which NVRTC does without a device.
"""

import ctypes
import os
import re
import subprocess
import sys
import unittest
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parents[1]
sys.path.insert(0, str(PYTHON_DIR))

import attnjit  # noqa: E402
from cache_dir import TemporaryCacheTest  # noqa: E402
from attnjit import _ffi, _launch  # noqa: E402

SPEC = "dtype=bf16 head_dim=64 mask=causal target=sm_90"
BACKWARD_SPEC = SPEC + " direction=backward"

# What attnjit.forward and attnjit.attention both refuse: (error, message, keyword arguments).
MASK_REFUSALS = [
    (ValueError, "mask", dict(mask="bogus")),
    (TypeError, "causal", dict(mask="flashmask", causal="yes")),
    (ValueError, "causal", dict(mask="sliding_window", causal=True)),
    (ValueError, "startend_row_indices", dict(mask="flashmask")),
    (ValueError, "startend_row_indices", dict(startend_row_indices=object())),
    (TypeError, "return_lse", dict(return_lse=1)),
]


def header_constants(text, prefix):
    return {name: int(value) for name, value in re.findall(rf"\b({prefix}\w+) = (\d+)", text)}


class LibraryTest(TemporaryCacheTest):
    def assert_refusals(self, function, cases):
        """function([1.0], [1.0], [1.0], **kwargs) raises `error` matching `message`, for each
        case of `cases` (error, message, kwargs)."""
        for error, message, kwargs in cases:
            with self.subTest(**{key: repr(value) for key, value in kwargs.items()}):
                with self.assertRaisesRegex(error, message):
                    function([1.0], [1.0], [1.0], **kwargs)

    def assert_user_error(self, status, message):
        """`status` is the C ABI's USER_ERROR and the last error says `message`."""
        self.assertEqual(status, _ffi.USER_ERROR)
        self.assertIn(message, _ffi.lib.attnjit_last_error().decode())

    def test_version(self):
        self.assertRegex(attnjit.version(), r"^\d+\.\d+\.\d+")

    def test_bad_spec_raises_user_error_naming_the_field(self):
        with self.assertRaisesRegex(attnjit.AttnjitError, "head_dim") as caught:
            attnjit.compile("dtype=bf16 head_dim=100 mask=causal target=sm_90")
        self.assertIn("100", str(caught.exception))
        with self.assertRaisesRegex(attnjit.AttnjitError, "mask: got 'bogus'"):
            attnjit.compile("dtype=bf16 head_dim=128 mask=bogus target=sm_90")
        with self.assertRaisesRegex(TypeError, "spec"):
            attnjit.compile(128)

    def test_constants_match_the_headers(self):
        header = (REPO / "include/attnjit/attnjit.h").read_text()
        dtypes = header_constants(header, "ATTNJIT_")
        self.assertEqual(dtypes["ATTNJIT_FP16"], _ffi.FP16)
        self.assertEqual(dtypes["ATTNJIT_BF16"], _ffi.BF16)
        self.assertEqual(dtypes["ATTNJIT_FP32"], _ffi.FP32)
        self.assertEqual(dtypes["ATTNJIT_INT32"], _ffi.INT32)
        self.assertEqual(dtypes["ATTNJIT_E4M3"], _ffi.E4M3)
        self.assertEqual(dtypes["ATTNJIT_OK"], _ffi.OK)
        self.assertEqual(dtypes["ATTNJIT_USER_ERROR"], _ffi.USER_ERROR)
        self.assertEqual(dtypes["ATTNJIT_DEVICE_ERROR"], _ffi.DEVICE_ERROR)
        self.assertEqual(dtypes["ATTNJIT_INTERNAL_ERROR"], _ffi.INTERNAL_ERROR)
        # The C enum must follow attnjit::ScalarType's order.
        tensor_hpp = (REPO / "include/attnjit/tensor.hpp").read_text()
        members = re.search(r"enum class ScalarType[^{]*\{([^}]*)\}", tensor_hpp).group(1)
        order = [name.strip() for name in members.split(",")]
        self.assertEqual(order, ["fp16", "bf16", "fp32", "int32", "e4m3"])
        self.assertEqual(_ffi.Tensor.shape.offset, 16)
        self.assertEqual(ctypes.sizeof(_ffi.Tensor), 80)

    def test_cache_dir_honors_the_environment(self):
        self.assertEqual(attnjit.cache_dir(), self.cache)

    def test_info_layout_and_cache_levels(self):
        attnjit.clear_cache(memory=True, disk=True)
        first = attnjit.compile(SPEC)
        info = first.info()
        self.assertCountEqual(info, ["key", "spec", "cache", "compile_ms", "kernels",
                                     "predicate_scalars"])
        self.assertEqual(info["predicate_scalars"], [])
        self.assertEqual(info["cache"], "miss")
        self.assertRegex(info["key"], r"^[0-9a-f]{32}$")
        self.assertIn("target=sm_90", info["spec"].split())
        self.assertIn("head_dim_qk=64", first.spec.split())
        self.assertGreater(info["compile_ms"], 0)
        self.assertGreaterEqual(len(info["kernels"]), 1)
        fields = ["name", "role", "registers", "spill_bytes", "stack_bytes", "static_smem_bytes",
                  "dynamic_smem_bytes", "threads"]
        for kernel in info["kernels"]:
            self.assertCountEqual(kernel, fields)
            self.assertIsInstance(kernel["name"], str)
            self.assertTrue(all(isinstance(kernel[field], int) for field in fields[2:]))
        self.assertIn("forward", [kernel["role"] for kernel in info["kernels"]])

        self.assertIs(attnjit.compile(SPEC), first)
        self.assertEqual(attnjit.Kernel.compile(SPEC).info()["cache"], "memory")
        attnjit.clear_cache(memory=True)
        self.assertEqual(attnjit.compile(SPEC).info()["cache"], "disk")
        self.assertEqual(first.info()["cache"], "miss")
        attnjit.clear_cache(memory=True, disk=True)
        self.assertEqual(os.listdir(self.cache), [])

    def test_size_protocol(self):
        kernel = attnjit.compile(SPEC)
        needed = _ffi.lib.attnjit_kernel_info(kernel._handle, None, 0)
        self.assertEqual(needed, len(_ffi.read_text(_ffi.lib.attnjit_kernel_info,
                                                    kernel._handle).encode()) + 1)
        small = ctypes.create_string_buffer(8)
        self.assertEqual(_ffi.lib.attnjit_kernel_info(kernel._handle, small, 8), needed)
        self.assertEqual(small.raw, b"\0" * 8)
        self.assertEqual(_ffi.lib.attnjit_cache_dir(None, 0), len(self.cache.encode()) + 1)

    def test_c_abi_rejects_bad_arguments(self):
        lib = _ffi.lib
        handle = ctypes.c_void_p()
        self.assert_user_error(lib.attnjit_compile(None, ctypes.byref(handle)), "spec_text")
        self.assertIsNone(handle.value)
        self.assert_user_error(lib.attnjit_compile(SPEC.encode(), None), "out")
        self.assertEqual(lib.attnjit_kernel_info(None, None, 0), _ffi.USER_ERROR)
        lib.attnjit_release(None)

        kernel = attnjit.compile(SPEC)
        q = _ffi.Tensor(0x1000, 7, 4, (64, 1, 1, 64), (64, 64, 64, 1))
        ok = _ffi.Tensor(0x1000, _ffi.BF16, 4, (1, 64, 1, 64), (4096, 64, 64, 1))
        args = [ctypes.byref(t) for t in (q, ok, ok, ok)] + [None, None, 0.0, -1, 0, None]
        self.assert_user_error(lib.attnjit_forward(kernel._handle, *args), "q.dtype: got '7'")
        args[0] = None
        self.assert_user_error(lib.attnjit_forward(kernel._handle, *args), "q: got 'NULL'")
        args[0] = ctypes.byref(_ffi.Tensor(0x1000, _ffi.BF16, 5))
        self.assert_user_error(lib.attnjit_forward(kernel._handle, *args), "q.rank")
        with self.assertRaisesRegex(attnjit.AttnjitError, "kernel"):
            _ffi.check(lib.attnjit_forward(None, *args))

    def test_forward_checks_arguments_before_needing_torch(self):
        self.assert_refusals(attnjit.forward, MASK_REFUSALS + [
            (TypeError, "spec", dict(spec=3)),
            (ValueError, "spec", dict(spec=SPEC, mask="causal")),
            (ValueError, "scale", dict(scale=-1.0)),
            (TypeError, "scale", dict(scale="1")),
            (TypeError, "window", dict(window=(1,))),
            (ValueError, "window", dict(window=(-2, 0))),
            (TypeError, "softcap", dict(softcap="30")),
            (TypeError, "softcap", dict(softcap=True)),
            (ValueError, "softcap: got 0", dict(softcap=0)),
            (ValueError, "softcap: got -1.5", dict(softcap=-1.5)),
            (ValueError, "softcap: got inf", dict(softcap=float("inf"))),
            (TypeError, "q: expected a torch.Tensor", dict()),
            (TypeError, "q: expected a torch.Tensor", dict(softcap=30.0)),
        ])

    def test_backward_spec_compiles_without_a_device(self):
        kernel = attnjit.compile(BACKWARD_SPEC)
        words = kernel.spec.split()
        self.assertIn("direction=backward", words)
        self.assertIn("deterministic=false", words)
        self.assertIn("backward", [k["role"] for k in kernel.info()["kernels"]])
        deterministic = attnjit.compile(BACKWARD_SPEC + " deterministic=true")
        self.assertIn("deterministic=true", deterministic.spec.split())
        self.assertNotEqual(deterministic.info()["key"], kernel.info()["key"])
        self.assertNotEqual(attnjit.compile(SPEC).info()["key"], kernel.info()["key"])

    def test_c_abi_backward_rejects_bad_arguments(self):
        lib = _ffi.lib
        self.assertEqual(lib.attnjit_backward.argtypes[1], ctypes.POINTER(_ffi.Tensor))
        ok = _ffi.Tensor(0x1000, _ffi.BF16, 4, (1, 64, 1, 64), (4096, 64, 64, 1))
        lse = _ffi.Tensor(0x1000, _ffi.FP32, 3, (1, 1, 64), (64, 64, 1))

        def arguments():
            """q, k, v, o, d_o, lse, startend_row_indices, d_q, d_k, d_v, scale, windows,
            stream, all well formed; each call below breaks one, so none reaches a launch."""
            return [ctypes.byref(ok)] * 5 + [ctypes.byref(lse), None] + \
                [ctypes.byref(ok)] * 3 + [0.0, -1, 0, None]

        backward = attnjit.compile(BACKWARD_SPEC)
        for index, field in ((0, "q"), (4, "d_o"), (5, "lse"), (7, "d_q"), (9, "d_v")):
            with self.subTest(null=field):
                args = arguments()
                args[index] = None
                self.assert_user_error(lib.attnjit_backward(backward._handle, *args),
                                       f"{field}: got 'NULL'")
        args = arguments()
        args[4] = ctypes.byref(_ffi.Tensor(0x1000, 9, 4, (1, 64, 1, 64), (4096, 64, 64, 1)))
        self.assert_user_error(lib.attnjit_backward(backward._handle, *args), "d_o.dtype: got '9'")
        args[4] = ctypes.byref(_ffi.Tensor(0x1000, _ffi.BF16, 6))
        self.assert_user_error(lib.attnjit_backward(backward._handle, *args), "d_o.rank")
        with self.assertRaisesRegex(attnjit.AttnjitError, "kernel"):
            _ffi.check(lib.attnjit_backward(None, *arguments()))

        forward = attnjit.compile(SPEC)
        self.assert_user_error(lib.attnjit_backward(forward._handle, *arguments()),
                               "direction=backward")
        forward_args = arguments()[:4] + [None, None, 0.0, -1, 0, None]
        self.assert_user_error(lib.attnjit_forward(backward._handle, *forward_args),
                               "direction=forward")

    def test_attention_checks_arguments_before_needing_torch(self):
        self.assert_refusals(attnjit.attention, MASK_REFUSALS + [
            (TypeError, "deterministic", dict(deterministic="true")),
            (ValueError, "scale", dict(scale=0.0)),
            (TypeError, "window", dict(window=(1, 2, 3))),
            (ValueError, "window", dict(window=(0, -5))),
            (ValueError, "softcap", dict(softcap=float("nan"))),
            (TypeError, "softcap", dict(softcap=[30.0])),
            (TypeError, "q: expected a torch.Tensor", dict()),
            (TypeError, "q: expected a torch.Tensor", dict(deterministic=True)),
        ])
        with self.assertRaises(TypeError):
            attnjit.attention([1.0], [1.0], [1.0], spec=SPEC)
        with self.assertRaisesRegex(TypeError, "q: expected a torch.Tensor"):
            attnjit.compile(BACKWARD_SPEC).run_backward(*[[1.0]] * 9)

    def test_score_modifiers_are_spec_flags_in_the_key(self):
        plain = attnjit.compile(SPEC)
        keys = {plain.info()["key"]}
        for flags, tag in (("softcap=true", "_softcap"), ("alibi=true", "_alibi"),
                           ("softcap=true alibi=true", "_softcap_alibi")):
            with self.subTest(flags=flags):
                kernel = attnjit.compile(f"{SPEC} {flags}")
                for word in flags.split():
                    self.assertIn(word, kernel.spec.split())
                forward = [k["name"] for k in kernel.info()["kernels"] if k["role"] == "forward"]
                self.assertEqual(forward, [f"attnjit_fwd_bf16_d64_causal{tag}"])
                keys.add(kernel.info()["key"])
                backward = attnjit.compile(f"{BACKWARD_SPEC} {flags}")
                self.assertIn(f"attnjit_bwd_bf16_d64_causal{tag}",
                              [k["name"] for k in backward.info()["kernels"]])
                keys.add(backward.info()["key"])
        self.assertEqual(len(keys), 7)
        self.assertIn("softcap=false", plain.spec.split())
        self.assertIn("alibi=false", plain.spec.split())

    def test_sinks_are_a_spec_flag_in_the_key(self):
        plain = attnjit.compile(SPEC)
        self.assertIn("sinks=false", plain.spec.split())
        sinks = attnjit.compile(SPEC + " sinks=true")
        self.assertIn("sinks=true", sinks.spec.split())
        self.assertNotEqual(sinks.info()["key"], plain.info()["key"])
        self.assertEqual([k["name"] for k in sinks.info()["kernels"]],
                         ["attnjit_fwd_bf16_d64_causal_sinks"])
        backward = [k["name"] for k in attnjit.compile(BACKWARD_SPEC + " sinks=true")
                    .info()["kernels"]]
        self.assertEqual(backward[:2], ["attnjit_bwd_preprocess_bf16_d64_zero_dq",
                                        "attnjit_bwd_sinks"])
        # The spec texts the calls build.
        for varlen in (False, "true", "shared"):
            text = _launch.spec_text("torch.bfloat16", 64, 64, "causal", False, 0, True, False,
                                     False, varlen=varlen, sinks=True)
            self.assertIn("sinks=true", text.split())
            self.assertEqual(attnjit.Kernel.compile(text + " target=sm_90").spec.split().count(
                "sinks=true"), 1)

    def test_sinks_are_refused_with_predicate_masks_before_needing_torch(self):
        for function in (attnjit.forward, attnjit.attention):
            with self.subTest(function=function.__name__):
                with self.assertRaisesRegex(ValueError, r"sinks: given with a predicate mask; "
                                                        r"accepted: None"):
                    function([1.0], [1.0], [1.0], mask=attnjit.predicate("q >= k"),
                             sinks=[0.5])

    def test_prepared_launch_takes_the_sinks_slots(self):
        lib = _ffi.lib
        kernel = attnjit.compile(SPEC + " sinks=true")
        ok = _ffi.Tensor(None, _ffi.BF16, 4, (1, 64, 2, 64), (8192, 128, 64, 1))
        sinks = _ffi.Tensor(None, _ffi.FP32, 1, (2, 0, 0, 0), (1, 0, 0, 0))
        absent = _ffi.Tensor()
        slots = (_ffi.Tensor * _ffi.SLOT_COUNT)(ok, ok, ok, ok, *[absent] * 10, sinks)
        handle = ctypes.c_void_p()
        self.assertEqual(lib.attnjit_launch_prepare(kernel._handle, slots, _ffi.SLOT_COUNT, None,
                                                    0.0, -1, 0, 0.0, 0, ctypes.byref(handle)),
                         _ffi.OK, lib.attnjit_last_error().decode())
        data = (ctypes.c_void_p * _ffi.SLOT_COUNT)(0x1000, 0x1000, 0x1000, 0x1000)
        self.assert_user_error(lib.attnjit_launch_run(handle, data, _ffi.SLOT_COUNT, None),
                               "data[14] (sinks): got 'NULL'")
        lib.attnjit_launch_release(handle)
        # A caller of the count before the sinks' slots gives none: the run names it.
        self.assertEqual(lib.attnjit_launch_prepare(kernel._handle, slots,
                                                    _ffi.SLOT_COUNT_VARLEN, None, 0.0, -1, 0,
                                                    0.0, -1, ctypes.byref(handle)), _ffi.OK)
        self.assert_user_error(lib.attnjit_launch_run(handle, data, _ffi.SLOT_COUNT_VARLEN, None),
                               "sinks: missing; accepted: for sinks=true an fp32 [2] tensor")
        lib.attnjit_launch_release(handle)

    def test_c_abi_checks_the_score_modifiers_arguments(self):
        lib = _ffi.lib
        ok = _ffi.Tensor(0x1000, _ffi.BF16, 4, (1, 64, 2, 64), (8192, 128, 64, 1))
        lse = _ffi.Tensor(0x1000, _ffi.FP32, 3, (1, 2, 64), (128, 64, 1))
        slopes = _ffi.Tensor(0x2000, _ffi.FP32, 1, (2, 0, 0, 0), (1, 0, 0, 0))

        def forward(kernel, softcap, alibi_slopes):
            tensors = [ctypes.byref(ok)] * 4 + [None, None]
            return lib.attnjit_forward_score_mod(
                kernel._handle, *tensors, 0.0, -1, 0, softcap,
                None if alibi_slopes is None else ctypes.byref(alibi_slopes), None)

        plain = attnjit.compile(SPEC)
        self.assert_user_error(forward(plain, 30.0, None), "softcap: got '30'; accepted: 0")
        self.assert_user_error(forward(plain, 0.0, slopes),
                               "alibi_slopes: given, but the spec has alibi=false")

        both = attnjit.compile(SPEC + " softcap=true alibi=true")
        self.assert_user_error(forward(both, 0.0, slopes),
                               "softcap: got '0'; accepted: a finite value > 0")
        self.assert_user_error(forward(both, -3.0, slopes), "softcap: got '-3'")
        self.assert_user_error(forward(both, 30.0, None),
                               "alibi_slopes: missing; accepted: for alibi=true an fp32 [2] tensor")
        wrong = _ffi.Tensor(0x2000, _ffi.BF16, 1, (2, 0, 0, 0), (1, 0, 0, 0))
        self.assert_user_error(forward(both, 30.0, wrong),
                               "alibi_slopes.dtype: got 'bf16'; accepted: fp32")
        wrong = _ffi.Tensor(0x2000, _ffi.FP32, 1, (3, 0, 0, 0), (1, 0, 0, 0))
        self.assert_user_error(forward(both, 30.0, wrong),
                               "alibi_slopes.shape[0]: got '3'; accepted: 2 (heads of q)")
        wrong = _ffi.Tensor(0x2000, 9, 1, (2, 0, 0, 0), (1, 0, 0, 0))
        self.assert_user_error(forward(both, 30.0, wrong), "alibi_slopes.dtype: got '9'")
        # The plain entry point passes no modifiers: a spec that needs them says which.
        args = [ctypes.byref(ok)] * 4 + [None, None, 0.0, -1, 0, None]
        self.assert_user_error(lib.attnjit_forward(both._handle, *args), "softcap: got '0'")

        backward = attnjit.compile(BACKWARD_SPEC + " alibi=true")
        tensors = [ctypes.byref(ok)] * 5 + [ctypes.byref(lse), None] + [ctypes.byref(ok)] * 3
        self.assert_user_error(lib.attnjit_backward_score_mod(backward._handle, *tensors, 0.0, -1,
                                                              0, 1.0, ctypes.byref(slopes), None),
                               "softcap: got '1'; accepted: 0")
        self.assert_user_error(lib.attnjit_backward(backward._handle, *tensors, 0.0, -1, 0, None),
                               "alibi_slopes: missing")

    def test_prepared_launch_checks_its_arguments(self):
        lib = _ffi.lib
        kernel = attnjit.compile(SPEC)
        ok = _ffi.Tensor(None, _ffi.BF16, 4, (1, 64, 1, 64), (4096, 64, 64, 1))

        def prepare(tensors, count=_ffi.SLOT_COUNT, device=0):
            handle = ctypes.c_void_p()
            code = lib.attnjit_launch_prepare(kernel._handle, tensors, count, None, 0.0, -1, 0,
                                              0.0, device, ctypes.byref(handle))
            return code, handle

        slots = (_ffi.Tensor * _ffi.SLOT_COUNT)(ok, ok, ok, ok)
        self.assert_user_error(prepare(slots, count=4)[0],
                               "tensor_count: got '4'; accepted: 23 (ATTNJIT_SLOT_COUNT), 20")
        self.assert_user_error(prepare(slots, device=-2)[0], "device: got '-2'")
        missing_v = (_ffi.Tensor * _ffi.SLOT_COUNT)(ok, ok, _ffi.Tensor(), ok)
        self.assert_user_error(prepare(missing_v)[0], "tensors[2] (v): got 'rank 0 (absent)'")
        with_grad = (_ffi.Tensor * _ffi.SLOT_COUNT)(ok, ok, ok, ok, _ffi.Tensor(), _ffi.Tensor(),
                                                    _ffi.Tensor(), ok)
        self.assert_user_error(prepare(with_grad)[0],
                               "tensors[7] (d_o): got 'a tensor'; accepted: rank 0 (absent) for a "
                               "forward kernel")

        code, handle = prepare(slots)
        self.assertEqual(code, _ffi.OK, lib.attnjit_last_error().decode())
        data = (ctypes.c_void_p * _ffi.SLOT_COUNT)(0x1000, 0x1000, 0x1000, 0x1000)
        self.assert_user_error(lib.attnjit_launch_run(handle, data, 3, None),
                               "data_count: got '3'; accepted: 23")
        data[1] = None
        self.assert_user_error(lib.attnjit_launch_run(handle, data, _ffi.SLOT_COUNT, None),
                               "data[1] (k): got 'NULL'")
        data[1], data[4] = 0x1000, 0x2000
        self.assert_user_error(lib.attnjit_launch_run(handle, data, _ffi.SLOT_COUNT, None),
                               "data[4] (lse): got 'a pointer'; accepted: NULL")
        self.assert_user_error(lib.attnjit_launch_run(None, data, _ffi.SLOT_COUNT, None),
                               "launch: got 'NULL'")
        lib.attnjit_launch_release(handle)
        lib.attnjit_launch_release(None)

    def test_prepared_launch_reports_and_checks_its_workspace(self):
        lib = _ffi.lib
        kernel = attnjit.compile(BACKWARD_SPEC)
        view = _ffi.Tensor(None, _ffi.BF16, 4, (2, 100, 4, 64), (25600, 256, 64, 1))
        lse = _ffi.Tensor(None, _ffi.FP32, 3, (2, 4, 100), (400, 100, 1))
        slots = (_ffi.Tensor * _ffi.SLOT_COUNT)(view, view, view, view, lse, _ffi.Tensor(),
                                                _ffi.Tensor(), view, view, view, view)
        handle = ctypes.c_void_p()
        self.assertEqual(lib.attnjit_launch_prepare(kernel._handle, slots, _ffi.SLOT_COUNT, None,
                                                    0.0, -1, 0, 0.0, -1, ctypes.byref(handle)),
                         _ffi.OK, lib.attnjit_last_error().decode())
        size = ctypes.c_size_t()
        self.assertEqual(lib.attnjit_launch_workspace_size(handle, ctypes.byref(size)), _ffi.OK)
        # The dQ accumulator (B*H*Sq*d fp32) and two rows of statistics (B*H*Sq fp32), each
        # rounded up to 256 bytes.
        rows = 2 * 4 * 100
        rounded = [(n + 255) // 256 * 256 for n in (rows * 4, rows * 4, rows * 64 * 4)]
        self.assertEqual(size.value, sum(rounded))
        data = (ctypes.c_void_p * _ffi.SLOT_COUNT)(*([0x10000] * 5 + [None, None] + [0x10000] * 4))
        self.assertEqual(lib.attnjit_launch_run_workspace(handle, data, _ffi.SLOT_COUNT, 0x40000,
                                                          size.value - 1, None),
                         _ffi.USER_ERROR)
        self.assertEqual(lib.attnjit_last_error().decode(),
                         f"workspace.bytes: got '{size.value - 1}'; accepted: at least "
                         f"{size.value} bytes for these shapes (Kernel::workspace_size)")
        self.assert_user_error(lib.attnjit_launch_workspace_size(None, ctypes.byref(size)),
                               "launch: got 'NULL'")
        lib.attnjit_launch_release(handle)

    def test_compile_for_device_and_cache_counters(self):
        lib = _ffi.lib
        handle = ctypes.c_void_p()
        self.assert_user_error(lib.attnjit_compile_for_device(SPEC.encode(), -3,
                                                              ctypes.byref(handle)),
                               "device: got '-3'")
        before = attnjit.cache_stats()
        self.assertCountEqual(before, ["memory_hits", "disk_hits", "compiles", "memory_entries"])
        # An explicit target needs no device, whatever ordinal is named.
        spec = "dtype=fp16 head_dim=64 mask=none target=sm_80"
        self.assertEqual(lib.attnjit_compile_for_device(spec.encode(), 5, ctypes.byref(handle)),
                         _ffi.OK, lib.attnjit_last_error().decode())
        kernel = attnjit.Kernel(handle)
        self.assertIn("target=sm_80", kernel.spec.split())
        after = attnjit.cache_stats()
        self.assertEqual(after["compiles"] + after["disk_hits"] + after["memory_hits"],
                         before["compiles"] + before["disk_hits"] + before["memory_hits"] + 1)

    def test_missing_library_is_an_import_error_listing_the_paths(self):
        environment = dict(os.environ, ATTNJIT_LIBRARY="/nonexistent/libattnjit.so",
                           PYTHONPATH=str(PYTHON_DIR))
        result = subprocess.run([sys.executable, "-c", "import attnjit"], env=environment,
                                capture_output=True, text=True, check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("ImportError", result.stderr)
        self.assertIn("/nonexistent/libattnjit.so", result.stderr)


if __name__ == "__main__":
    unittest.main()
