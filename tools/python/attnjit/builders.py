"""FlashMask masks of the standard families, built on the host by libattnjit's builders.

    mask = attnjit.flashmask("causal_document", seqlen=8192, batch=16,
                             doc_lengths=[[4096, 4096], [1000, 7192], ...])
    o = attnjit.attention(q, k, v, mask=mask)

Families and their parameters (README "Mask semantics"; N = seqlen):

    full, causal             none (no vectors)
    sliding_window           window: keys seen by each row, itself included (causal)
    causal_document          doc_lengths: lengths summing to N
    document                 doc_lengths
    share_question           documents: one list per packed sample, [question, answer, ...]
                             lengths; question keys are seen by the sample's later rows,
                             answer keys only by their own answer (causal)
    global_sliding_window    global_tokens, left, right
    causal_blockwise         blocks: demonstration block lengths; test: test block length
    prefix_lm_causal         prefix
    prefix_lm_document       doc_lengths, prefixes (one per document)
    qk_sparse                offset, length: the dropped key segment
    random_eviction          evicted_at_row: N values, key j is seen by rows j <= i < value

A parameter given once applies to every sample; given one level deeper (a list of `batch`
values, e.g. doc_lengths=[[...], [...]]) it is per sample; evicted_at_row may also be given
per sample and mask head ([batch][heads][N]). Samples are broadcast to `heads` mask heads
otherwise. Bad parameters raise AttnjitError naming the parameter, its value and what is
accepted.
"""

import array
import ctypes
import importlib.util

from . import _ffi

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
        "attnjit_intervals_sliding_window": [c_int, c_int, out],
        "attnjit_intervals_causal_document": [ints, size, out],
        "attnjit_intervals_document": [ints, size, out],
        "attnjit_intervals_share_question": [c_int, ints, size, out],
        "attnjit_intervals_global_sliding_window": [c_int, c_int, c_int, c_int, out],
        "attnjit_intervals_causal_blockwise": [ints, size, c_int, out],
        "attnjit_intervals_prefix_lm_causal": [c_int, c_int, out],
        "attnjit_intervals_prefix_lm_document": [ints, ints, size, out],
        "attnjit_intervals_qk_sparse": [c_int, c_int, c_int, out],
        "attnjit_intervals_random_eviction": [ints, size, out],
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

# Parameter -> nesting depth of one sample's value (0: an int, 1: a list of ints, 2: a list of
# lists of ints), per family, in the order the builder takes them.
FAMILIES = {
    "full": {},
    "causal": {},
    "sliding_window": {"window": 0},
    "causal_document": {"doc_lengths": 1},
    "document": {"doc_lengths": 1},
    "share_question": {"documents": 2},
    "global_sliding_window": {"global_tokens": 0, "left": 0, "right": 0},
    "causal_blockwise": {"blocks": 1, "test": 0},
    "prefix_lm_causal": {"prefix": 0},
    "prefix_lm_document": {"doc_lengths": 1, "prefixes": 1},
    "qk_sparse": {"offset": 0, "length": 0},
    "random_eviction": {"evicted_at_row": 1},
}


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


def _int_array(values):
    """(int32 array, count) of an int32 array.array from _depth, for an (int32_t*, size_t)
    pair of the C ABI (the array must outlive the call)."""
    return (ctypes.c_int32 * len(values)).from_buffer(values), len(values)


class FlashMask:
    """A mask of a standard family, ready for attnjit.attention(q, k, v, mask=...) and
    attnjit.forward(..., mask=...).

    kind: "none", "causal" or "flashmask"; causal and columns: the flashmask structure (the
    spec's mask=flashmask(causal=...,columns=...)); mask_text: the spec's mask value.
    startend_row_indices: int32 [batch, heads, seqlen, columns] -- a torch tensor (on the
    `device` given to flashmask(), else the CPU) when PyTorch is installed, otherwise nested
    lists; None for "none" and "causal".
    """

    def __init__(self, family, seqlen, batch, heads, handle=None, device=None):
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

    @property
    def mask_text(self):
        """The spec's mask value, e.g. "flashmask(causal=true,columns=1)"."""
        if self.kind != "flashmask":
            return self.kind
        return f"flashmask(causal={str(self.causal).lower()},columns={self.columns})"

    def visible_pairs(self, heads):
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


def _check_total(name, total, seqlen, where):
    if total != seqlen:
        raise _ffi.AttnjitError(f"{name}: sum {total}{where}; accepted: seqlen ({seqlen})")


def _sample(family, seqlen, values, where):
    """The handle of one sample of `family` with its parameter values."""
    lib = _lib
    if family == "sliding_window":
        return _build(lib.attnjit_intervals_sliding_window, seqlen, values["window"])
    if family in ("causal_document", "document"):
        _check_total("doc_lengths", sum(values["doc_lengths"]), seqlen, where)
        function = getattr(lib, f"attnjit_intervals_{family}")
        return _build(function, *_int_array(values["doc_lengths"]))
    if family == "share_question":
        pieces = []
        for d, document in enumerate(values["documents"]):
            if not document:
                raise _ffi.AttnjitError(f"documents[{d}]: got an empty list{where}; accepted: "
                                        "[question, answer, ...] lengths")
            pieces.append(_build(lib.attnjit_intervals_share_question, document[0],
                                 *_int_array(document[1:])))
        _check_total("documents", sum(sum(document) for document in values["documents"]),
                     seqlen, where)
        return _combine(lib.attnjit_intervals_pack, pieces)
    if family == "global_sliding_window":
        return _build(lib.attnjit_intervals_global_sliding_window, seqlen,
                      values["global_tokens"], values["left"], values["right"])
    if family == "causal_blockwise":
        _check_total("blocks + test", sum(values["blocks"]) + values["test"], seqlen, where)
        return _build(lib.attnjit_intervals_causal_blockwise, *_int_array(values["blocks"]),
                      values["test"])
    if family == "prefix_lm_causal":
        return _build(lib.attnjit_intervals_prefix_lm_causal, seqlen, values["prefix"])
    if family == "prefix_lm_document":
        lengths, prefixes = values["doc_lengths"], values["prefixes"]
        _check_total("doc_lengths", sum(lengths), seqlen, where)
        if len(prefixes) != len(lengths):
            raise _ffi.AttnjitError(f"prefixes: got {len(prefixes)}{where}; accepted: one per "
                                    f"document ({len(lengths)})")
        return _build(lib.attnjit_intervals_prefix_lm_document, _int_array(lengths)[0],
                      _int_array(prefixes)[0], len(lengths))
    if family == "qk_sparse":
        return _build(lib.attnjit_intervals_qk_sparse, seqlen, values["offset"],
                      values["length"])
    rows = values["evicted_at_row"]
    if len(rows) != seqlen:
        raise _ffi.AttnjitError(f"evicted_at_row: got {len(rows)} values{where}; accepted: "
                                f"seqlen ({seqlen})")
    return _build(lib.attnjit_intervals_random_eviction, *_int_array(rows))


def _combine(function, handles, *extra):
    pointers = (ctypes.c_void_p * len(handles))(*[handle.value for handle in handles])
    return _build(function, pointers, len(handles), *extra)


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= INT32_MAX:
        raise _ffi.AttnjitError(f"{name}: got {value!r}; accepted: an int from {minimum} to "
                                f"{INT32_MAX}")


def flashmask(family, seqlen, *, batch=1, heads=1, device=None, **parameters):
    """A FlashMask of `family` for `batch` samples of `seqlen` tokens and `heads` mask heads
    (1, or the number of KV heads); see the module's documentation for the families and
    their parameters. `device` places the vectors' tensor (default: the CPU).
    """
    if family not in FAMILIES:
        raise _ffi.AttnjitError(f"family: got {family!r}; accepted: {', '.join(FAMILIES)}")
    _check_int("seqlen", seqlen, 1)
    _check_int("batch", batch, 1)
    _check_int("heads", heads, 1)
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
                                                   family == "random_eviction")
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
