"""FlashMask vectors built and checked on the GPU (attnjit.build_mask, attnjit.validate_intervals).

>>> cu_seqlens = torch.tensor([[0, 512, 1024], [0, 1024, 1024]], dtype=torch.int32,
...                           device="cuda")  # [B, S+1]                    # doctest: +GPU
>>> text, lts = attnjit.build_mask("causal_document", 1024, offsets=cu_seqlens)  # doctest: +GPU
>>> text                                                                     # doctest: +GPU
'flashmask(causal=true,columns=1)'
>>> o = attnjit.forward(q, k, v, mask="flashmask", causal=True,
...                     startend_row_indices=lts)                           # doctest: +GPU
>>> attnjit.validate_intervals(lts, causal=True, seqlen_q=1024)             # doctest: +GPU

FAMILIES lists the families with vectors of libattnjit's family table; the parameters each
reads are its "device_parameters" there (include/attnjit/mask_builder.hpp describes them); the
vectors equal those of the host builders in dsl/builders.hpp. Parameters are int32 CUDA tensors
(offsets [B, S+1] in cu_seqlens style, one value per sample [B], prefixes [B, S]) or plain ints
(window sizes). Argument checks need no PyTorch; building needs it and a CUDA device.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Optional, Tuple

from . import _families, _ffi

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["FAMILIES", "build_mask", "mask_family", "validate_intervals"]

FAMILIES = tuple(family["name"] for family in _families.TABLE if family["columns"] > 0)
_TENSOR_FIELDS = ("offsets", "prefix", "prefixes", "test", "dropped_start", "dropped_length")
_INT_FIELDS = ("window", "global_tokens", "window_left", "window_right")


class MaskBuildArgs(ctypes.Structure):
    """attnjit_mask_build_args of attnjit.h."""

    _fields_ = ([("family", ctypes.c_char_p)]
                + [(name, _ffi.Tensor) for name in _TENSOR_FIELDS]
                + [(name, ctypes.c_int) for name in _INT_FIELDS]
                + [("seed", ctypes.c_uint64), ("validate", ctypes.c_int)])


def _declare(lib):
    tensor_p = ctypes.POINTER(_ffi.Tensor)
    int_p = ctypes.POINTER(ctypes.c_int)
    signatures = {
        "attnjit_mask_family": (ctypes.c_int, [ctypes.c_char_p, int_p, int_p]),
        "attnjit_mask_build": (ctypes.c_int, [ctypes.POINTER(MaskBuildArgs), tensor_p,
                                              ctypes.c_void_p]),
        "attnjit_validate_intervals": (ctypes.c_int, [tensor_p, ctypes.c_int, ctypes.c_int,
                                                      ctypes.c_int, ctypes.c_void_p]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes


_declare(_ffi.lib)


def mask_family(family: str) -> Tuple[bool, int]:
    """(causal, columns) of a family's vectors.

    >>> attnjit.mask_family("causal_document")
    (True, 1)
    """
    if not isinstance(family, str):
        raise TypeError(f"family: expected a str, got {type(family).__name__}")
    causal, columns = ctypes.c_int(), ctypes.c_int()
    _ffi.check(_ffi.lib.attnjit_mask_family(_ffi.text_argument("family", family),
                                            ctypes.byref(causal),
                                            ctypes.byref(columns)))
    return bool(causal.value), columns.value


def mask_text(causal: bool, columns: int) -> str:
    """The spec's mask structure, e.g. "flashmask(causal=true,columns=1)". AttnjitError (a
    ValueError) for a layout no spec takes: causal masks have 1 or 2 columns, others 2 or 4."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {type(causal).__name__}")
    accepted = (1, 2) if causal else (2, 4)
    if isinstance(columns, bool) or not isinstance(columns, int) or columns not in accepted:
        raise _ffi.AttnjitError(
            f"columns: got {columns!r}; accepted: {accepted[0]} or {accepted[1]} for "
            f"causal={causal} (a causal mask has 1 or 2 columns, a non-causal one 2 or 4)")
    return f"flashmask(causal={str(causal).lower()},columns={columns})"


def build_mask(family: str, seqlen: int, *, batch: Optional[int] = None, heads: int = 1,
               offsets: Optional[Tensor] = None, prefix: Optional[Tensor] = None,
               prefixes: Optional[Tensor] = None, test: Optional[Tensor] = None,
               dropped_start: Optional[Tensor] = None, dropped_length: Optional[Tensor] = None,
               window: Optional[int] = None, global_tokens: Optional[int] = None,
               window_left: Optional[int] = None, window_right: Optional[int] = None,
               seed: Optional[int] = None, validate: bool = False,
               device: Any = None) -> Tuple[str, Tensor]:
    """Builds the vectors of `family` for `batch` samples of `seqlen` tokens on the GPU.

    Returns (mask text for the spec, startend_row_indices int32 [B, heads, seqlen, C]), C and
    the causal flag being the family's (mask_family). The batch is `batch`, else the first
    dimension of the tensor parameters, else 1; `heads` > 1 only for random_eviction. The
    result is on the parameters' device (else `device`, else the current CUDA device) and is
    written on torch's current stream of that device, asynchronously unless `validate` (which
    also checks the device parameters and waits; ATTNJIT_DEBUG=1 does the same).

    >>> text, lts = attnjit.build_mask("sliding_window", 1024, batch=2,
    ...                                window=128)                      # doctest: +GPU
    >>> tuple(lts.shape)                                                 # doctest: +GPU
    (2, 1, 1024, 1)
    """
    causal, columns = mask_family(family)
    tensors = {"offsets": offsets, "prefix": prefix, "prefixes": prefixes, "test": test,
               "dropped_start": dropped_start, "dropped_length": dropped_length}
    ints = {"window": window, "global_tokens": global_tokens, "window_left": window_left,
            "window_right": window_right}
    for name, value in (("seqlen", seqlen), ("heads", heads)):
        _check_int(name, value)
    if batch is not None:
        _check_int("batch", batch)
    for name, value in ints.items():
        if value is not None:
            _check_int(name, value)
    if seed is not None:
        _ffi.int_argument("seed", seed, 0, 2**64 - 1)
    if not isinstance(validate, bool):
        raise TypeError(f"validate: expected a bool, got {type(validate).__name__}")

    given = [(name, tensor) for name, tensor in tensors.items() if tensor is not None]
    torch = _torch_module(given)
    for name, tensor in given:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    if device is None:
        device = given[0][1].device if given else torch.device("cuda",
                                                               torch.cuda.current_device())
    device = torch.device(device)
    for name, tensor in given:
        if tensor.device != device:
            raise ValueError(f"{name}: on {tensor.device}; accepted: {device} (the device of "
                             "the result)")
    if batch is None:
        batch = given[0][1].shape[0] if given and given[0][1].dim() > 0 else 1

    out = torch.empty((batch, heads, seqlen, columns), dtype=torch.int32, device=device)
    args = MaskBuildArgs()
    args.family = _ffi.text_argument("family", family)
    for name, tensor in given:
        setattr(args, name, _descriptor(torch, name, tensor))
    for name, value in ints.items():
        setattr(args, name, -1 if value is None else value)
    args.seed = 0 if seed is None else seed
    args.validate = int(validate)
    descriptor = _descriptor(torch, "startend_row_indices", out)
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        _ffi.check(_ffi.lib.attnjit_mask_build(ctypes.byref(args), ctypes.byref(descriptor),
                                               stream))
    return mask_text(causal, columns), out


def validate_intervals(startend_row_indices: Tensor, *, causal: bool, seqlen_q: int) -> None:
    """Checks FlashMask vectors int32 [B, Hm, Sk, C] on their device (torch's current stream;
    waits for it): values in [0, seqlen_q], LTS <= LTE and UTS <= UTE where present. Raises
    AttnjitError naming the first bad (batch, head, column, vector), its value and the accepted
    range."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {type(causal).__name__}")
    _check_int("seqlen_q", seqlen_q)
    torch = _torch_module([("startend_row_indices", startend_row_indices)])
    columns = startend_row_indices.shape[-1] if startend_row_indices.dim() > 0 else 0
    descriptor = _descriptor(torch, "startend_row_indices", startend_row_indices)
    device = startend_row_indices.device
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        _ffi.check(_ffi.lib.attnjit_validate_intervals(ctypes.byref(descriptor), int(causal),
                                                       columns, seqlen_q, stream))


def _check_int(name, value):
    _ffi.int_argument(name, value)


def _torch_module(given):
    """The torch module: that of the first tensor argument (TypeError if it is no torch
    tensor), else the installed one."""
    from . import _torch_of  # the package's check, shared with attnjit.forward

    if given:
        name, tensor = given[0]
        return _torch_of(tensor, name)
    try:
        import torch
    except ImportError as error:
        raise ImportError("attnjit.build_mask needs PyTorch to allocate the vectors on a CUDA "
                          "device") from error
    return torch


def _descriptor(torch, name, tensor):
    """The attnjit_tensor of an int32 CUDA tensor."""
    from . import _descriptor as tensor_descriptor

    if tensor.device.type != "cuda":
        raise ValueError(f"{name}: on device {tensor.device}; accepted: a CUDA device")
    if tensor.dtype != torch.int32:
        raise TypeError(f"{name}: dtype {tensor.dtype}; accepted: torch.int32")
    return tensor_descriptor(name, tensor)
