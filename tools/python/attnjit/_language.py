"""The mask language through libattnjit (attnjit_mask_parse, attnjit_host_mask_build): what
attnjit.predicate and attnjit.flashmask use for families (`document([4,3,3])`) and their
combinations with & and | (docs/masks.md), the text `attnc mask --expr` reads.

The structure is decided from the text (parse); the data -- FlashMask vectors, or a predicate's
scalars and int32 tensors, generated ones such as `_doc0` included -- is built on the host for
one problem size (build), from the tensors the text names given as host values.
"""

from __future__ import annotations

import array
import ctypes
import json
from typing import Any, Dict, List, Mapping, Tuple

from . import _ffi

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def parse(expression: str) -> Dict[str, Any]:
    """{"form", "mask", "scalars", "tensors", "element"} of attnjit_mask_parse: the form decided
    from the text alone, the spec's mask, the literals' values, the names of the tensors the
    text reads and whether it is one element predicate. AttnjitError with the line and column
    for bad text."""
    return json.loads(_ffi.read_text(_ffi.lib.attnjit_mask_parse,
                                     _ffi.text_argument("expression", expression)))


class HostMask:
    """An attnjit_host_mask handle (released with this object) and its info."""

    def __init__(self, handle: ctypes.c_void_p):
        self._handle = handle
        self._release = _ffi.lib.attnjit_host_mask_release
        self.info = json.loads(_ffi.read_text(_ffi.lib.attnjit_host_mask_info, handle))

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            self._release(handle)

    def intervals(self) -> ctypes.c_void_p:
        """A new attnjit_intervals handle holding the vectors (the intervals form)."""
        out = ctypes.c_void_p()
        _ffi.check(_ffi.lib.attnjit_host_mask_intervals(self._handle, ctypes.byref(out)))
        return out

    def tensor(self, index: int) -> List[List[int]]:
        """Tensor `index` of the predicate form as `rows` lists of `length` ints."""
        described = self.info["tensors"][index]
        rows, length = described["rows"], described["length"]
        values = ctypes.POINTER(ctypes.c_int32)()
        _ffi.check(_ffi.lib.attnjit_host_mask_tensor(self._handle, index, ctypes.byref(values)))
        flat = values[:rows * length] if rows * length else []
        return [flat[r * length:(r + 1) * length] for r in range(rows)]


def _rows(name: str, value: Any) -> List[array.array]:
    """The rows of a host tensor given as a list of ints (one row), a list of lists of ints,
    or anything with tolist() (a torch tensor on any device, a NumPy array)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"tensors[{name!r}]: expected a list of ints, a list of lists of ints "
                        f"or a tensor, got {type(value).__name__}")
    rows = value if value and isinstance(value[0], (list, tuple)) else [value]
    out = []
    for row in rows:
        if not isinstance(row, (list, tuple)) or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in row):
            raise TypeError(f"tensors[{name!r}]: expected ints or lists of ints of one depth")
        if any(x < INT32_MIN or x > INT32_MAX for x in row):
            raise _ffi.AttnjitError(f"tensors[{name!r}]: got a value outside the int32 range; "
                                    "accepted: int32 values")
        out.append(array.array("i", row))
    if len({len(row) for row in out}) > 1:
        raise _ffi.AttnjitError(f"tensors[{name!r}]: got rows of lengths "
                                f"{sorted({len(row) for row in out})}; accepted: rows of one "
                                "length (pad samples with zeros)")
    return out


def build(expression: str, batch: int, seqlen_q: int, seqlen_k: int,
          tensors: Mapping[str, Any]) -> HostMask:
    """The mask of `expression` built for `batch` samples of seqlen_q queries and seqlen_k keys
    from `tensors` (name -> host values, see _rows)."""
    for name, value in (("batch", batch), ("seqlen_q", seqlen_q), ("seqlen_k", seqlen_k)):
        _ffi.int_argument(name, value)
    described: List[Tuple[bytes, array.array, int, int]] = []
    for name, value in tensors.items():
        rows = _rows(name, value)
        flat = array.array("i")
        for row in rows:
            flat.extend(row)
        described.append((_ffi.text_argument("tensors", name), flat, len(rows),
                          len(rows[0]) if rows else 0))
    buffers = [(ctypes.c_int32 * max(len(flat), 1))(*flat) for _, flat, _, _ in described]
    host = (_ffi.HostTensor * max(len(described), 1))(*[
        _ffi.HostTensor(name, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_int32)), rows, length)
        for (name, _, rows, length), buffer in zip(described, buffers)])
    handle = ctypes.c_void_p()
    _ffi.check(_ffi.lib.attnjit_host_mask_build(
        _ffi.text_argument("expression", expression), batch, seqlen_q, seqlen_k, host,
        len(described), ctypes.byref(handle)))
    return HostMask(handle)
