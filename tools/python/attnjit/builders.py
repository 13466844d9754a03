"""FlashMask masks of the mask families, built on the host by libattnjit's builders.

>>> import attnjit
>>> mask = attnjit.flashmask("causal_document", seqlen=8, batch=2,
...                          doc_lengths=[[4, 4], [1, 7]])   # one list per sample
>>> mask
FlashMask('causal_document', seqlen=8, batch=2, heads=1, mask='flashmask(causal=true,columns=1)')
>>> q8, k8, v8 = (t[:, :8] for t in (q, k, v))  # 8 tokens       # doctest: +GPU
>>> o = attnjit.attention(q8, k8, v8, mask=mask)                # doctest: +GPU

FAMILIES maps every family of libattnjit's family table to its parameters (docs/masks.md,
"The twelve families"; N = seqlen), e.g.

    full, causal             none (no vectors)
    sliding_window           window: keys seen by each row, itself included (causal)
    causal_document          doc_lengths: lengths summing to N
    share_question           documents: one list per packed sample, [question, answer, ...]
                             lengths; question keys are seen by the sample's later rows,
                             answer keys only by their own answer (causal)
    random_eviction          evicted_at_row: N values, key j is seen by rows j <= i < value

A parameter given once applies to every sample; given one level deeper (a list of `batch`
values, e.g. doc_lengths=[[...], [...]]) it is per sample; the parameters of a family whose
vectors differ between mask heads (random_eviction) may also be given per sample and mask head
([batch][heads][N]). Samples are broadcast to `heads` mask heads otherwise. Bad parameters
raise AttnjitError naming the parameter, its value and what is accepted.

In place of a family name, flashmask() also takes a mask of the mask language that FlashMask
vectors can hold (docs/masks.md: a family call, an intersection, a predicate of the interval
form), with the host values of the tensors it names:

>>> mask = attnjit.flashmask("causal_document(len)", seqlen=6, batch=2,
...                          tensors={"len": [[2, 4], [6, 0]]})   # lengths per sample
>>> mask.mask_text, mask.visible_pairs(heads=1)
('flashmask(causal=true,columns=1)', 34)
"""

from __future__ import annotations

import array
import ctypes
import importlib.util
import json
import re
from typing import Any, Optional

from . import _families, _ffi, _language

__all__ = ["FAMILIES", "FlashMask", "flashmask"]


class _Shape(ctypes.Structure):
    """attnjit_intervals_shape."""

    _fields_ = [(name, ctypes.c_int) for name in
                ("causal", "columns", "batch", "heads", "seqlen_q", "seqlen_k")]


def _declare(lib):
    handle = ctypes.c_void_p
    out = ctypes.POINTER(handle)
    ints = ctypes.POINTER(ctypes.c_int32)
    size = ctypes.c_size_t
    c_int = ctypes.c_int
    signatures = {
        "attnjit_intervals_family": [ctypes.c_char_p, c_int, ctypes.c_char_p, ctypes.c_char_p,
                                     out],
        "attnjit_intervals_pack": [ctypes.POINTER(handle), size, out],
        "attnjit_intervals_stack": [ctypes.POINTER(handle), size, c_int, out],
        "attnjit_intervals_broadcast_heads": [handle, c_int, out],
        "attnjit_intervals_get_shape": [handle, ctypes.POINTER(_Shape)],
        "attnjit_intervals_visible_pairs": [handle, c_int, ctypes.POINTER(ctypes.c_int64)],
    }
    for name, argtypes in signatures.items():
        function = getattr(lib, name)
        function.restype = ctypes.c_int
        function.argtypes = argtypes
    lib.attnjit_intervals_data.restype = ints
    lib.attnjit_intervals_data.argtypes = [handle]
    lib.attnjit_intervals_release.restype = None
    lib.attnjit_intervals_release.argtypes = [handle]
    return lib


_lib = _declare(_ffi.lib)

# Family -> {parameter: nesting depth of one sample's value (0: an int, 1: a list of ints, 2: a
# list of lists of ints)}, in table order, the parameters in the order the builder takes them.
FAMILIES = {family["name"]: {p["name"]: p["depth"] for p in family["parameters"]}
            for family in _families.TABLE}
_PER_HEAD = {family["name"] for family in _families.TABLE if family["per_head"]}


class _Handle:
    """An attnjit_intervals handle, released with its owner."""

    def __init__(self, value):
        self.value = value
        self._release = _lib.attnjit_intervals_release

    def __del__(self):
        if getattr(self, "value", None):
            self._release(self.value)


def _build(function, *args):
    """Calls an attnjit_intervals_* builder; returns the new handle."""
    out = ctypes.c_void_p()
    _ffi.check(function(*args, ctypes.byref(out)))
    return _Handle(out)


def _plain(value):
    """A parameter value from _depth as JSON data: ints and (nested) lists of ints."""
    if isinstance(value, int):
        return value
    return [_plain(item) for item in value] if isinstance(value, list) else value.tolist()


class FlashMask:
    """A mask of a standard family, ready for attnjit.attention(q, k, v, mask=...) and
    attnjit.forward(..., mask=...).

    kind: "none", "causal" or "flashmask"; causal and columns: the flashmask structure (the
    spec's mask=flashmask(causal=...,columns=...)); mask_text: the spec's mask value.
    startend_row_indices: int32 [batch, heads, seqlen, columns] -- a torch tensor (on the
    `device` given to flashmask(), else the CPU) when PyTorch is installed, otherwise nested
    lists; None for "none" and "causal".
    """

    def __init__(self, family: str, seqlen: int, batch: int, heads: int,
                 handle: Optional[_Handle] = None, device: Any = None):
        self.family = family
        self.seqlen = seqlen
        self.batch = batch
        self.heads = heads
        self._handle = handle
        self._on_device = {}
        self.startend_row_indices = None
        if handle is None:
            self.kind = "causal" if family == "causal" else "none"
            self.causal = family == "causal"
            self.columns = 0
            return
        shape = _Shape()
        _ffi.check(_lib.attnjit_intervals_get_shape(handle.value, ctypes.byref(shape)))
        self.kind = "flashmask"
        self.causal = bool(shape.causal)
        self.columns = shape.columns
        self.startend_row_indices = self._values(shape, device)

    def __repr__(self) -> str:
        return (f"FlashMask({self.family!r}, seqlen={self.seqlen}, batch={self.batch}, "
                f"heads={self.heads}, mask={self.mask_text!r})")

    @property
    def mask_text(self) -> str:
        """The spec's mask value, e.g. "flashmask(causal=true,columns=1)"."""
        if self.kind != "flashmask":
            return self.kind
        return f"flashmask(causal={str(self.causal).lower()},columns={self.columns})"

    def visible_pairs(self, heads: int) -> int:
        """Visible (query, key) pairs summed over the batch and `heads` query heads (a multiple
        of the mask heads): the forward pass does 4 * head_dim * visible_pairs FLOPs."""
        _check_int("heads", heads, 1)
        if self._handle is None:
            n = self.seqlen
            per_head = n * (n + 1) // 2 if self.kind == "causal" else n * n
            return per_head * self.batch * heads
        pairs = ctypes.c_int64()
        _ffi.check(_lib.attnjit_intervals_visible_pairs(self._handle.value, heads,
                                                        ctypes.byref(pairs)))
        return pairs.value

    def attention_arguments(self, q, causal, startend_row_indices):
        """(mask, causal, startend_row_indices) for attnjit.forward/attention with this mask,
        the vectors on q's device (copied there once and kept)."""
        if causal is not False or startend_row_indices is not None:
            raise ValueError("mask: a FlashMask given together with causal= or "
                             "startend_row_indices=; accepted: the mask alone (it holds them)")
        indices = self.startend_row_indices
        # Attribute look-ups only (torch.compile traces this): a tensor q and tensor vectors
        # on another device get a copy on q's device.
        device = getattr(q, "device", None)
        if device is not None and getattr(indices, "device", device) != device:
            key = str(device)
            if key not in self._on_device:
                self._on_device[key] = indices.to(q.device)
            indices = self._on_device[key]
        return self.kind, self.causal and self.kind == "flashmask", indices

    def _values(self, shape, device):
        count = shape.batch * shape.heads * shape.seqlen_k * shape.columns
        pointer = _lib.attnjit_intervals_data(self._handle.value)
        flat = (ctypes.c_int32 * count).from_address(ctypes.addressof(pointer.contents))
        dims = (shape.batch, shape.heads, shape.seqlen_k, shape.columns)
        if importlib.util.find_spec("torch") is None:
            if device is not None:
                raise ValueError(f"device: got {device!r} without PyTorch; accepted: None")
            values = array.array("i", bytes(flat)).tolist()
            for size in reversed(dims[1:]):
                values = [values[i:i + size] for i in range(0, len(values), size)]
            return values
        import torch

        tensor = torch.frombuffer(flat, dtype=torch.int32).clone().reshape(dims)
        return tensor if device is None else tensor.to(device)


INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def _depth(value, name):
    """(nesting depth, value) of an int (0), a list of ints (1, as an int32 array) or nested
    lists of them; objects with tolist() (tensors, arrays) are converted first."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, int) and not isinstance(value, bool):
        if not INT32_MIN <= value <= INT32_MAX:
            raise _ffi.AttnjitError(f"{name}: got {value}; accepted: an int32 value")
        return 0, value
    if isinstance(value, (list, tuple)):
        if not value or not isinstance(value[0], (list, tuple)):
            try:
                return 1, array.array("i", value)
            except OverflowError:
                raise _ffi.AttnjitError(f"{name}: got a value outside the int32 range; "
                                        "accepted: int32 values") from None
            except TypeError:
                other = next(type(v).__name__ for v in value if not isinstance(v, int))
                raise _ffi.AttnjitError(f"{name}: got a list holding {other}; accepted: ints or "
                                        "(nested) lists of ints") from None
        items = [_depth(item, name) for item in value]
        depths = {depth for depth, _ in items}
        if len(depths) > 1:
            raise _ffi.AttnjitError(f"{name}: got a list mixing ints and lists; accepted: "
                                    "ints or lists of one nesting depth")
        return 1 + depths.pop(), [item for _, item in items]
    raise _ffi.AttnjitError(f"{name}: got {type(value).__name__}; accepted: ints or (nested) "
                            "lists of ints")


def _per_sample(name, value, depth, batch, heads, per_head_allowed):
    """The value of parameter `name` for each (sample, head) as a list of `batch` lists of
    `heads` values, and whether the heads differ."""
    given, value = _depth(value, name)
    if given == depth:
        return [[value] * heads for _ in range(batch)], False
    if given in (depth + 1, depth + 2) and len(value) != batch:
        raise _ffi.AttnjitError(f"{name}: got {len(value)} per-sample values; accepted: one per "
                                f"sample (batch={batch})")
    if given == depth + 1:
        return [[sample] * heads for sample in value], False
    if given == depth + 2 and per_head_allowed:
        for b, sample in enumerate(value):
            if len(sample) != heads:
                raise _ffi.AttnjitError(f"{name}[{b}]: got {len(sample)} per-head values; "
                                        f"accepted: one per mask head (heads={heads})")
        return value, True
    kinds = ["an int", "a list of ints", "a list of lists of ints", "a list of lists of lists"]
    accepted = f"{kinds[depth]} (every sample) or {kinds[depth + 1]} (one per sample)"
    if per_head_allowed:
        accepted += f", or {kinds[depth + 2]} (one per sample and mask head)"
    raise _ffi.AttnjitError(f"{name}: got {kinds[min(given, 3)]}; accepted: {accepted}")


def _sample(family, seqlen, values, where):
    """The handle of one sample of `family` with its parameter values (libattnjit checks them
    against seqlen, `where` naming the sample in those messages)."""
    parameters = json.dumps({name: _plain(value) for name, value in values.items()})
    return _build(_lib.attnjit_intervals_family, family.encode(), seqlen, parameters.encode(),
                  where.encode())


def _combine(function, handles, *extra):
    pointers = (ctypes.c_void_p * len(handles))(*[handle.value for handle in handles])
    return _build(function, pointers, len(handles), *extra)


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= INT32_MAX:
        raise _ffi.AttnjitError(f"{name}: got {value!r}; accepted: an int from {minimum} to "
                                f"{INT32_MAX}")


def flashmask(family: str, seqlen: int, *, batch: int = 1, heads: int = 1, device: Any = None,
              **parameters: Any) -> FlashMask:
    """A FlashMask of `family` for `batch` samples of `seqlen` tokens and `heads` mask heads
    (1, or the number of KV heads); see the module's documentation for the families and
    their parameters. `device` places the vectors' tensor (default: the CPU).

    `family` may also be a mask of the mask language of the interval form (or none or causal),
    with `tensors=` giving the host values of the tensors it names and no other parameter.

    >>> attnjit.flashmask("document", seqlen=10, doc_lengths=[4, 3, 3]).visible_pairs(heads=1)
    34
    >>> attnjit.flashmask("document([4,3,3]) & sliding_window(2)", seqlen=10).mask_text
    'flashmask(causal=true,columns=1)'
    """
    if not isinstance(family, str):
        raise TypeError(f"family: expected a str, got {type(family).__name__}")
    _check_int("seqlen", seqlen, 1)
    _check_int("batch", batch, 1)
    _check_int("heads", heads, 1)
    if family not in FAMILIES and not re.fullmatch(r"[A-Za-z_]\w*", family):
        return _from_expression(family, seqlen, batch, heads, device, parameters)
    if family not in FAMILIES:
        raise _ffi.AttnjitError(f"family: got {family!r}; accepted: {', '.join(FAMILIES)}, or "
                                "a mask expression such as 'document([4,3,3])'")
    expected = FAMILIES[family]
    unknown = sorted(set(parameters) - set(expected))
    missing = [name for name in expected if name not in parameters]
    if unknown or missing:
        problem = f"unknown {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
        accepted = ", ".join(expected) or "none"
        raise _ffi.AttnjitError(f"{family} parameters: {problem}; accepted: {accepted}")
    if not expected:
        return FlashMask(family, seqlen, batch, heads)

    per_head = {}
    values = {}
    for name, depth in expected.items():
        values[name], per_head[name] = _per_sample(name, parameters[name], depth, batch, heads,
                                                   family in _PER_HEAD)
    if not any(per_head.values()):
        samples = [_sample(family, seqlen, {name: values[name][b][0] for name in expected},
                           f" (sample {b})" if batch > 1 else "") for b in range(batch)]
        stacked = _combine(_lib.attnjit_intervals_stack, samples, 1)
        if heads > 1:
            stacked = _build(_lib.attnjit_intervals_broadcast_heads, stacked.value, heads)
        return FlashMask(family, seqlen, batch, heads, stacked, device)
    samples = [_sample(family, seqlen, {name: values[name][b][h] for name in expected},
                       f" (sample {b}, head {h})") for b in range(batch) for h in range(heads)]
    return FlashMask(family, seqlen, batch, heads,
                     _combine(_lib.attnjit_intervals_stack, samples, heads), device)


def _from_expression(expression, seqlen, batch, heads, device, parameters):
    """flashmask() of a mask-language expression: its vectors, built on the host."""
    tensors = parameters.pop("tensors", None) or {}
    if parameters:
        raise _ffi.AttnjitError(f"parameters: got {', '.join(sorted(parameters))} with the mask "
                                f"expression {expression!r}; accepted: tensors= only (the "
                                "expression holds the family parameters)")
    if not isinstance(tensors, dict):
        raise TypeError(f"tensors: expected a dict of name -> host values, got "
                        f"{type(tensors).__name__}")
    parsed = _language.parse(expression)
    names = parsed["tensors"]
    if sorted(tensors) != sorted(names):
        raise ValueError(f"tensors: got {sorted(tensors)}; accepted: exactly the tensors the "
                         f"expression reads, {names}")
    if parsed["form"] == "predicate":
        raise _ffi.AttnjitError(f"family: got {expression!r}, which needs the predicate form "
                                f"({parsed['mask']}); accepted: a family or an expression "
                                "FlashMask vectors hold (attnjit.predicate takes any mask)")
    if parsed["form"] != "intervals":
        mask = FlashMask(parsed["mask"], seqlen, batch, heads)
        mask.family = expression
        return mask
    host = _language.build(expression, batch, seqlen, seqlen, tensors)
    handle = _Handle(host.intervals())
    if heads > 1:
        handle = _build(_lib.attnjit_intervals_broadcast_heads, handle.value, heads)
    return FlashMask(expression, seqlen, batch, heads, handle, device)
