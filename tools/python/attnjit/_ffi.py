"""ctypes declarations of libattnjit's C ABI (include/attnjit/attnjit.h) and the library lookup.

The library is found from the ATTNJIT_LIBRARY environment variable, else next to this file (an
installed package: `pip install .` puts it there), else in the build trees of the repository
holding this package: <repo>/build/libattnjit.so, then <repo>/build-*/.
"""

import ctypes
import os
from pathlib import Path

LIBRARY_NAME = "libattnjit.so"

# Return codes (ATTNJIT_OK ...) and tensor element types (ATTNJIT_FP16 ...) of attnjit.h.
OK = 0
USER_ERROR = 1
DEVICE_ERROR = 2
INTERNAL_ERROR = 3

FP16 = 0
BF16 = 1
FP32 = 2
INT32 = 3
E4M3 = 4


class AttnjitError(ValueError):
    """A bad spec, tensor or argument; the message names the field and what is accepted."""


class DeviceError(RuntimeError):
    """No CUDA driver or device, a Driver API call failed, NVRTC rejected generated code, or
    the disk cache's files cannot be listed or removed."""


class InternalError(RuntimeError):
    """A bug in attnjit (or the host ran out of memory)."""


class Tensor(ctypes.Structure):
    """attnjit_tensor: a device pointer, element type, rank, shape and strides in elements."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("shape", ctypes.c_int64 * 4),
        ("stride", ctypes.c_int64 * 4),
    ]


SLOT_COUNT = 23  # ATTNJIT_SLOT_COUNT: q, k, v, o, lse, startend_row_indices, alibi_slopes,
                 # d_o, d_q, d_k, d_v, cu_seqlens_q, cu_seqlens_k, seqused_k, sinks, d_sinks,
                 # cache_seqlens, block_table, k_new, v_new, q_descale, k_descale, v_descale
SLOT_COUNT_KVCACHE = 20  # ATTNJIT_SLOT_COUNT_KVCACHE: the slots before the descales' ones
SLOT_COUNT_SINKS = 16  # ATTNJIT_SLOT_COUNT_SINKS: the slots before the cache's ones
SLOT_COUNT_VARLEN = 14  # ATTNJIT_SLOT_COUNT_VARLEN: the slots before the sinks' ones
SLOT_COUNT_PADDED = 11  # ATTNJIT_SLOT_COUNT_PADDED: the slots before the packed batches' ones


class CacheCounters(ctypes.Structure):
    """attnjit_cache_counters."""

    _fields_ = [
        ("memory_hits", ctypes.c_uint64),
        ("disk_hits", ctypes.c_uint64),
        ("compiles", ctypes.c_uint64),
        ("memory_entries", ctypes.c_uint64),
    ]


class PredicateInputs(ctypes.Structure):
    """attnjit_predicate_inputs: the scalar values and the named tensors of a predicate mask."""
    _fields_ = [
        ("scalars", ctypes.POINTER(ctypes.c_int32)),
        ("scalar_count", ctypes.c_int),
        ("tensor_names", ctypes.POINTER(ctypes.c_char_p)),
        ("tensors", ctypes.POINTER(Tensor)),
        ("tensor_count", ctypes.c_int),
    ]


class HostTensor(ctypes.Structure):
    """attnjit_host_tensor: a named int32 host tensor [rows, length] a mask expression reads."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("values", ctypes.POINTER(ctypes.c_int32)),
        ("rows", ctypes.c_int),
        ("length", ctypes.c_int),
    ]


def candidate_paths():
    """Where the library is looked for, in order."""
    configured = os.environ.get("ATTNJIT_LIBRARY")
    if configured:
        return [Path(configured)]
    here = Path(__file__).resolve().parent
    if (here / LIBRARY_NAME).is_file():
        return [here / LIBRARY_NAME]
    repo = here.parents[2]
    return [repo / "build" / LIBRARY_NAME] + sorted(repo.glob("build-*/" + LIBRARY_NAME))


def _load():
    paths = candidate_paths()
    for path in paths:
        if path.is_file():
            return ctypes.CDLL(str(path))
    looked = ", ".join(str(path) for path in paths) or "(no build directory)"
    raise ImportError(
        f"attnjit: cannot find {LIBRARY_NAME}; looked at: {looked}. Build the attnjit_shared "
        "target (cmake --build <build dir> --target attnjit_shared) or set ATTNJIT_LIBRARY to "
        "the library's path."
    )


def _declare(lib):
    kernel_p = ctypes.c_void_p
    tensor_p = ctypes.POINTER(Tensor)
    signatures = {
        "attnjit_compile": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(kernel_p)]),
        "attnjit_compile_reference": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(kernel_p)]),
        "attnjit_release": (None, [kernel_p]),
        "attnjit_forward": (ctypes.c_int, [kernel_p] + [tensor_p] * 6 + [
            ctypes.c_float, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]),
        "attnjit_backward": (ctypes.c_int, [kernel_p] + [tensor_p] * 10 + [
            ctypes.c_float, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]),
        "attnjit_forward_score_mod": (ctypes.c_int, [kernel_p] + [tensor_p] * 6 + [
            ctypes.c_float, ctypes.c_int, ctypes.c_int, ctypes.c_float, tensor_p,
            ctypes.c_void_p]),
        "attnjit_backward_score_mod": (ctypes.c_int, [kernel_p] + [tensor_p] * 10 + [
            ctypes.c_float, ctypes.c_int, ctypes.c_int, ctypes.c_float, tensor_p,
            ctypes.c_void_p]),
        "attnjit_forward_kvcache": (ctypes.c_int, [kernel_p] + [tensor_p] * 8 + [
            ctypes.POINTER(PredicateInputs)] + [tensor_p] * 3 + [
            ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_int, ctypes.c_int, ctypes.c_float,
            tensor_p, tensor_p, ctypes.c_void_p]),
        "attnjit_forward_predicate": (ctypes.c_int, [kernel_p] + [tensor_p] * 5 + [
            ctypes.POINTER(PredicateInputs), ctypes.c_float, ctypes.c_float, tensor_p,
            ctypes.c_void_p]),
        "attnjit_backward_predicate": (ctypes.c_int, [kernel_p] + [tensor_p] * 6 + [
            ctypes.POINTER(PredicateInputs)] + [tensor_p] * 3 + [
                ctypes.c_float, ctypes.c_float, tensor_p, ctypes.c_void_p]),
        "attnjit_predicate_lift": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p,
                                                  ctypes.c_size_t]),
        "attnjit_compile_for_device": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int,
                                                      ctypes.POINTER(kernel_p)]),
        "attnjit_launch_prepare": (ctypes.c_int, [kernel_p, tensor_p, ctypes.c_int,
                                                  ctypes.POINTER(PredicateInputs),
                                                  ctypes.c_float, ctypes.c_int, ctypes.c_int,
                                                  ctypes.c_float, ctypes.c_int,
                                                  ctypes.POINTER(ctypes.c_void_p)]),
        "attnjit_launch_prepare_varlen": (ctypes.c_int, [kernel_p, tensor_p, ctypes.c_int,
                                                         ctypes.POINTER(PredicateInputs),
                                                         ctypes.c_float, ctypes.c_int,
                                                         ctypes.c_int, ctypes.c_float,
                                                         ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                                         ctypes.POINTER(ctypes.c_void_p)]),
        "attnjit_launch_prepare_kvcache": (ctypes.c_int, [kernel_p, tensor_p, ctypes.c_int,
                                                          ctypes.POINTER(PredicateInputs),
                                                          ctypes.c_float, ctypes.c_int,
                                                          ctypes.c_int, ctypes.c_float,
                                                          ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                                          ctypes.POINTER(ctypes.c_void_p)]),
        "attnjit_launch_run": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                              ctypes.c_void_p]),
        "attnjit_launch_workspace_size": (ctypes.c_int, [ctypes.c_void_p,
                                                         ctypes.POINTER(ctypes.c_size_t)]),
        "attnjit_launch_run_workspace": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p,
                                                        ctypes.c_int, ctypes.c_void_p,
                                                        ctypes.c_size_t, ctypes.c_void_p]),
        "attnjit_launch_release": (None, [ctypes.c_void_p]),
        "attnjit_cache_stats": (ctypes.c_int, [ctypes.POINTER(CacheCounters)]),
        "attnjit_kernel_info": (ctypes.c_int, [kernel_p, ctypes.c_char_p, ctypes.c_size_t]),
        "attnjit_kernel_ptx": (ctypes.c_int, [kernel_p, ctypes.c_int, ctypes.c_char_p,
                                              ctypes.c_size_t]),
        "attnjit_mask_parse": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p,
                                              ctypes.c_size_t]),
        "attnjit_host_mask_build": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                                                   ctypes.c_int, ctypes.POINTER(HostTensor),
                                                   ctypes.c_int,
                                                   ctypes.POINTER(ctypes.c_void_p)]),
        "attnjit_host_mask_info": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p,
                                                  ctypes.c_size_t]),
        "attnjit_host_mask_intervals": (ctypes.c_int, [ctypes.c_void_p,
                                                       ctypes.POINTER(ctypes.c_void_p)]),
        "attnjit_host_mask_tensor": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int,
                                                    ctypes.POINTER(
                                                        ctypes.POINTER(ctypes.c_int32))]),
        "attnjit_host_mask_release": (None, [ctypes.c_void_p]),
        "attnjit_cache_clear": (ctypes.c_int, [ctypes.c_int, ctypes.c_int]),
        "attnjit_cache_dir": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]),
        "attnjit_set_disk_cache_mode": (ctypes.c_int, [ctypes.c_int]),
        "attnjit_disk_cache_mode": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]),
        "attnjit_last_error": (ctypes.c_char_p, []),
        "attnjit_version": (ctypes.c_char_p, []),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


lib = _declare(_load())

_ERRORS = {USER_ERROR: AttnjitError, DEVICE_ERROR: DeviceError, INTERNAL_ERROR: InternalError}


def check(code):
    """Raises the exception of a nonzero return code with the library's message."""
    if code != OK:
        error = _ERRORS.get(code, InternalError)
        raise error(lib.attnjit_last_error().decode("utf-8", "replace"))


INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1


def text_argument(name, value):
    """The bytes of a str for a char* parameter. AttnjitError for a NUL character, where C
    would stop reading and see a shorter text, and for a character UTF-8 cannot encode (a lone
    surrogate)."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str, got {type(value).__name__}")
    if "\0" in value:
        raise AttnjitError(f"{name}: got a NUL character at index {value.index(chr(0))}; "
                           "accepted: text without NUL characters")
    try:
        return value.encode()
    except UnicodeEncodeError as error:
        raise AttnjitError(
            f"{name}: got the lone surrogate U+{ord(value[error.start]):04X} at index "
            f"{error.start}; accepted: text UTF-8 can encode") from None


def int_argument(name, value, minimum=INT_MIN, maximum=INT_MAX):
    """`value` for a C int parameter. TypeError for a non-int (bool included); AttnjitError
    outside [minimum, maximum], which ctypes would silently wrap."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise AttnjitError(f"{name}: got {value}; accepted: an int from {minimum} to {maximum}")
    return value


def read_text(function, *args):
    """Calls a function with attnjit.h's size protocol (0: fit; > 3: bytes needed) to a str."""
    size = 256
    while True:
        buffer = ctypes.create_string_buffer(size)
        result = function(*args, buffer, size)
        if result == OK:
            return buffer.value.decode("utf-8")
        if result <= INTERNAL_ERROR:
            check(result)
        size = result
