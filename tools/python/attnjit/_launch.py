"""The launches under attnjit.forward, attnjit.attention, attnjit.attention_varlen and the torch
custom ops (_ops.py).

Each function here takes real CUDA tensors, allocates the outputs with torch on the inputs'
device, and enqueues attnjit's kernels on torch's current stream of that device through a
prepared launch of the C ABI (attnjit_launch_prepare or, for packed batches,
attnjit_launch_prepare_varlen / attnjit_launch_run). What follows from
(spec arguments, dtype, device) -- the spec text, the compiled kernel -- and from (kernel,
shapes, strides, scalars) -- the prepared launch -- is cached, so a repeated call does: the
device checks, two dictionary look-ups, the output allocations, and one ctypes call with the
data pointers and the stream. Nothing here synchronises the host, so the calls can be captured
into CUDA graphs (after a first call has compiled and loaded the kernels).

Scratch memory (FlashMask tables, CTA orders, predicate tables and bits, the backward's dQ
accumulator and row statistics) is a workspace tensor from torch's caching allocator on the
launch's device and current stream, allocated for each run that needs one (a prepared launch
knows its size) and handed to the C ABI: it shows in torch.cuda.memory_allocated while the
kernels may use it, and comes from the graph's private pool under CUDA graph capture.
"""

import ctypes

from . import _ffi
from ._ffi import AttnjitError

_SLOT_NAMES = ("q", "k", "v", "o", "lse", "startend_row_indices", "alibi_slopes", "d_o", "d_q",
               "d_k", "d_v", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "sinks", "d_sinks",
               "cache_seqlens", "block_table", "k_new", "v_new", "q_descale", "k_descale",
               "v_descale")
_NO_BOUNDARIES = (None, None, None)  # the cu_seqlens slots of a padded batch's launch
NO_PREDICATE = ((), (), ())  # the (names, scalars, tensors) of a mask that is no predicate
_SPEC_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3"}
_CODES = {"float16": _ffi.FP16, "bfloat16": _ffi.BF16, "float32": _ffi.FP32,
          "int32": _ffi.INT32, "float8_e4m3fn": _ffi.E4M3}
_NO_CACHE = (None, None, None, None, None)  # d_sinks and the KV cache's slots of a forward
_NO_DESCALES = (None, None, None)
# The bound on each cache below: shapes that change at every call (varying sequence lengths)
# must not grow them without limit; past it a cache starts over.
_CACHE_LIMIT = 4096

_kernels = {}   # (spec text, device index) -> (Kernel, returns lse)
_specs = {}     # (spec arguments, dtype, head dims, ...) -> spec text
_launches = {}  # (kernel key, shapes, strides, scalars) -> _Launch


class _Launch:
    """An attnjit_launch handle, released with its last reference, and the bytes of scratch
    memory its runs take."""

    __slots__ = ("handle", "workspace", "_release")

    def __init__(self, handle):
        self.handle = handle
        self._release = _ffi.lib.attnjit_launch_release
        size = ctypes.c_size_t()
        _ffi.check(_ffi.lib.attnjit_launch_workspace_size(handle, ctypes.byref(size)))
        self.workspace = size.value

    def __del__(self):
        if self.handle:
            self._release(self.handle)


def _raw_stream_getter(torch):
    """The cheapest way to read the raw CUstream of torch's current stream of a device index."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


_stream = None


def stream_of(torch, index):
    """The raw CUstream (an int) of torch's current stream on CUDA device `index`."""
    global _stream
    if _stream is None:
        _stream = _raw_stream_getter(torch)
    return _stream(index)


def kernel(spec, index):
    """(Kernel, returns_lse) of `spec` compiled for CUDA device `index` (its arch when the spec
    has no target=); compiled once per process, spec text and device."""
    key = (spec, index)
    found = _kernels.get(key)
    if found is None:
        from . import Kernel
        handle = ctypes.c_void_p()
        _ffi.check(_ffi.lib.attnjit_compile_for_device(_ffi.text_argument("spec", spec), index,
                                                       ctypes.byref(handle)))
        compiled = Kernel(handle)
        found = (compiled, "return_lse=true" in compiled.spec.split())
        if len(_kernels) >= _CACHE_LIMIT:
            _kernels.clear()
        _kernels[key] = found
    return found


def spec_text(dtype, head_dim_qk, head_dim_v, mask, causal, columns, return_lse, softcap,
              alibi, backward=False, deterministic=False, varlen=False, sinks=False):
    """The spec of one call (cached): dtype a torch dtype, mask one of attnjit.MASKS or a
    predicate's lifted structure as predicate(...); varlen for a packed batch: "true", or
    "shared" when the keys take the queries' boundaries; sinks for sink logits."""
    key = (dtype, head_dim_qk, head_dim_v, mask, causal, columns, return_lse, softcap, alibi,
           backward, deterministic, varlen, sinks)
    text = _specs.get(key)
    if text is None:
        name = str(dtype).removeprefix("torch.")
        if mask == "none" and causal:
            mask = "causal"
        if mask == "flashmask":
            mask = f"flashmask(causal={str(causal).lower()},columns={columns})"
        text = (f"dtype={_SPEC_DTYPES[name]} head_dim_qk={head_dim_qk} "
                f"head_dim_v={head_dim_v} mask={mask} return_lse={str(return_lse).lower()} "
                f"softcap={str(softcap).lower()} alibi={str(alibi).lower()}")
        if backward:
            text += f" direction=backward deterministic={str(deterministic).lower()}"
        if varlen:
            text += f" varlen={varlen}"
        if sinks:
            text += " sinks=true"
        if len(_specs) >= _CACHE_LIMIT:
            _specs.clear()
        _specs[key] = text
    return text


def device_index(tensors):
    """The CUDA device index of the named tensors (pairs of name, tensor or None); AttnjitError
    naming the first tensor on the CPU or on another device than the first one."""
    index = None
    first = None
    for name, tensor in tensors:
        if tensor is None:
            continue
        device = tensor.get_device()
        if device < 0:
            raise AttnjitError(f"{name}: on device {tensor.device}; accepted: a CUDA device")
        if index is None:
            index, first = device, name
        elif device != index:
            raise AttnjitError(f"{name}: on {tensor.device} but {first} is on cuda:{index}; "
                               f"accepted: {first}'s device")
    return index


def _descriptor(name, tensor):
    """The attnjit_tensor (shape, strides, dtype; no pointer) of a slot; rank 0 when absent."""
    if tensor is None:
        return _ffi.Tensor()
    code = _CODES.get(str(tensor.dtype).removeprefix("torch."))
    if code is None:
        raise AttnjitError(f"{name}: dtype {tensor.dtype}; accepted: "
                           + ", ".join("torch." + d for d in _CODES))
    rank = tensor.dim()
    if rank < 1 or rank > 4:
        raise AttnjitError(f"{name}: rank {rank}; accepted: 1 to 4")
    padding = [0] * (4 - rank)
    return _ffi.Tensor(None, code, rank, (ctypes.c_int64 * 4)(*tensor.shape, *padding),
                       (ctypes.c_int64 * 4)(*tensor.stride(), *padding))


def _prepare(compiled, slots, predicate, scalars, index, max_seqlens=None, num_splits=None):
    """A new _Launch binding `slots` (the tensors of the first slots, None where absent; the
    rest absent), `predicate` (names, scalar values, tensors; None or empty without a predicate
    mask) and the scalar arguments; `max_seqlens` (max_seqlen_q, max_seqlen_k) for a packed
    batch's kernel (attnjit_launch_prepare_varlen), `num_splits` for a KV cache's
    (attnjit_launch_prepare_kvcache; its max_seqlens (max_seqlen_q,) with ragged new
    tokens)."""
    descriptors = (_ffi.Tensor * _ffi.SLOT_COUNT)(
        *[_descriptor(name, tensor) for name, tensor in zip(_SLOT_NAMES, slots)])
    inputs = None
    keep = None
    if predicate is not None:
        names, values, tensors = predicate
        count = len(names)
        values_array = (ctypes.c_int32 * max(len(values), 1))(*values)
        names_array = (ctypes.c_char_p * max(count, 1))(
            *[_ffi.text_argument("tensors", n) for n in names])
        tensor_array = (_ffi.Tensor * max(count, 1))(
            *[_descriptor(f"tensors[{n!r}]", t) for n, t in zip(names, tensors)])
        inputs = _ffi.PredicateInputs(
            ctypes.cast(values_array, ctypes.POINTER(ctypes.c_int32)), len(values),
            ctypes.cast(names_array, ctypes.POINTER(ctypes.c_char_p)),
            ctypes.cast(tensor_array, ctypes.POINTER(_ffi.Tensor)), count)
        keep = (values_array, names_array, tensor_array)
    handle = ctypes.c_void_p()
    if num_splits is not None:  # a KV cache's launch
        max_seqlen_q = 0 if max_seqlens is None else max_seqlens[0]
        _ffi.check(_ffi.lib.attnjit_launch_prepare_kvcache(
            compiled._handle, descriptors, _ffi.SLOT_COUNT,
            None if inputs is None else ctypes.byref(inputs), *scalars, num_splits, max_seqlen_q,
            index, ctypes.byref(handle)))
        del keep
        return _Launch(handle)
    scale, window_left, window_right, softcap = scalars
    common = (compiled._handle, descriptors, _ffi.SLOT_COUNT,
              None if inputs is None else ctypes.byref(inputs), scale, window_left,
              window_right, softcap)
    if max_seqlens is None:
        code = _ffi.lib.attnjit_launch_prepare(*common, index, ctypes.byref(handle))
    else:
        code = _ffi.lib.attnjit_launch_prepare_varlen(*common, *max_seqlens, index,
                                                      ctypes.byref(handle))
    _ffi.check(code)
    del keep
    return _Launch(handle)


def _layout(tensor):
    return None if tensor is None else (tensor.shape, tensor.stride())


def run(torch, compiled, slots, scalars, index, predicate=None):
    """Enqueues `compiled` on torch's current stream of device `index` with the tensors of the
    first slots (None: absent; the rest absent) and scalars (scale, window_left, window_right,
    softcap); `predicate` is (names, scalar values, tensors) for a predicate mask."""
    key = (compiled._handle.value, index, scalars, tuple(map(_layout, slots)))
    predicate_tensors = ()
    if predicate is not None:
        key += (tuple(predicate[1]), tuple(map(_layout, predicate[2])))
        predicate_tensors = predicate[2]
    launch = _launches.get(key)
    if launch is None:
        launch = _prepare(compiled, slots, predicate, scalars, index)
        if len(_launches) >= _CACHE_LIMIT:
            _launches.clear()
        _launches[key] = launch
    _launch_run(torch, launch, index, *_launch_data(_pointers(slots), predicate_tensors))


_run_workspace = _ffi.lib.attnjit_launch_run_workspace


def _launch_run(torch, launch, index, data, count):
    """Runs `launch` on torch's current stream of device `index`, with a workspace tensor from
    torch's caching allocator when it takes scratch memory (freed to the stream's pool after
    the call: the allocator reuses it only for work queued after these kernels)."""
    if launch.workspace:
        workspace = torch.empty(launch.workspace, dtype=torch.uint8, device=index)
        code = _run_workspace(launch.handle, data, count, workspace.data_ptr(), launch.workspace,
                              stream_of(torch, index))
    else:
        code = _run_workspace(launch.handle, data, count, None, 0, stream_of(torch, index))
    if code:
        _ffi.check(code)


def _kernel_layout(tensor):
    """`tensor`, or a contiguous copy when the kernels do not take its layout (last dimension
    contiguous, other strides whole 16-byte rows, a 16-byte aligned start)."""
    strides = tensor.stride()
    if (strides[-1] == 1 and all(stride % 8 == 0 for stride in strides[:-1])
            and tensor.data_ptr() % 16 == 0):
        return tensor
    return tensor.contiguous()


def _signature(tensor):
    return None if tensor is None else (tensor.get_device(), tensor.dtype, tensor.shape,
                                        tensor.stride())


class _Call:
    """What a call with one signature (arguments, devices, dtypes, shapes, strides) needs:
    its prepared launch, device and output shapes."""

    __slots__ = ("launch", "index", "o_shape", "lse_shape", "o_dtype")

    def __init__(self, launch, index, o_shape, lse_shape, o_dtype=None):
        self.launch = launch
        self.index = index
        self.o_shape = o_shape
        self.lse_shape = lse_shape
        self.o_dtype = o_dtype  # None: q's


_calls = {}  # call signature -> _Call
_Pointers = ctypes.c_void_p * _ffi.SLOT_COUNT


def _remember(key, call):
    if len(_calls) >= _CACHE_LIMIT:
        _calls.clear()
    _calls[key] = call


def _launch_data(pointers, predicate_tensors=()):
    """The data array of a run and its length: `pointers`, the first slots' (the rest absent),
    and after all slots one pointer per predicate tensor."""
    if not predicate_tensors:
        return _Pointers(*pointers), _ffi.SLOT_COUNT
    data = tuple(pointers) + (None,) * (_ffi.SLOT_COUNT - len(pointers)) \
        + _pointers(predicate_tensors)
    return (ctypes.c_void_p * len(data))(*data), len(data)


def _enqueue(torch, call, pointers, predicate_tensors=()):
    """Runs a call's launch with _launch_data's array of `pointers` and `predicate_tensors`."""
    _launch_run(torch, call.launch, call.index, *_launch_data(pointers, predicate_tensors))


def output_dtype(torch, q):
    """The dtype of o for inputs of q's dtype: q's, bf16 for e4m3 inputs."""
    return torch.bfloat16 if q.dtype == getattr(torch, "float8_e4m3fn", None) else q.dtype


def forward(torch, q, k, v, indices, slopes, mask, causal, scale, window_left, window_right,
            softcap, return_lse, spec, check=None, sinks=None, descales=_NO_DESCALES):
    """attnjit.forward's launch: (o, lse or None). `spec` "" builds the spec from the
    arguments; scale 0.0 is 1/sqrt(D); softcap 0.0 is none; sinks (fp32 [H]) or None;
    descales (q_descale, k_descale, v_descale), each fp32 or None, for e4m3 inputs.
    `check(q, k, v, indices, slopes, sinks, descales)` (attnjit's argument checks) runs the
    first time a call signature is seen: everything it looks at is in the signature, so a
    repeated call skips it."""
    try:
        key = (mask, causal, return_lse, spec, scale, window_left, window_right, softcap,
               _signature(q), _signature(k), _signature(v), _signature(indices),
               _signature(slopes), _signature(sinks), *map(_signature, descales))
    except (AttributeError, TypeError):
        if check is not None:
            check(q, k, v, indices, slopes, sinks, descales)
        raise
    call = _calls.get(key)
    if call is None:
        if check is not None:
            check(q, k, v, indices, slopes, sinks, descales)
        call = _forward_call(torch, q, k, v, indices, slopes, mask, causal, scale, window_left,
                             window_right, softcap, return_lse, spec, sinks, descales)
        _remember(key, call)
    o = q.new_empty(call.o_shape, dtype=call.o_dtype)
    lse = None if call.lse_shape is None else q.new_empty(call.lse_shape, dtype=torch.float32)
    _enqueue(torch, call, (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                           None if lse is None else lse.data_ptr(),
                           None if indices is None else indices.data_ptr(),
                           None if slopes is None else slopes.data_ptr(), None, None, None, None)
             + _NO_BOUNDARIES + _pointers((sinks,)) + _NO_CACHE + _pointers(descales))
    return o, lse


def _forward_call(torch, q, k, v, indices, slopes, mask, causal, scale, window_left,
                  window_right, softcap, return_lse, spec, sinks, descales):
    index = device_index((("q", q), ("k", k), ("v", v), ("startend_row_indices", indices),
                          ("alibi_slopes", slopes), ("sinks", sinks))
                         + tuple(zip(_SLOT_NAMES[20:], descales)))
    if not spec:
        spec = spec_text(q.dtype, q.shape[3], v.shape[3], mask, causal,
                         0 if indices is None else indices.shape[3], return_lse, softcap > 0,
                         slopes is not None, sinks=sinks is not None)
    compiled, with_lse = kernel(spec, index)
    batch, seqlen_q, heads = q.shape[0], q.shape[1], q.shape[2]
    o_shape = (batch, seqlen_q, heads, v.shape[3])
    lse_shape = (batch, heads, seqlen_q) if with_lse else None
    o_dtype = output_dtype(torch, q)
    o = q.new_empty(o_shape, dtype=o_dtype)
    lse = None if lse_shape is None else q.new_empty(lse_shape, dtype=torch.float32)
    launch = _prepare(compiled, (q, k, v, o, lse, indices, slopes, None, None, None, None)
                      + _NO_BOUNDARIES + (sinks,) + _NO_CACHE + tuple(descales), None,
                      (scale, window_left, window_right, softcap), index)
    return _Call(launch, index, o_shape, lse_shape, o_dtype)


def kvcache_output_shapes(q, v_cache, cu_seqlens_q, return_lse):
    """The shapes of attention_with_kvcache's o and lse (None without return_lse): [B, Sq, H,
    Dv] and [B, H, Sq], or with ragged new tokens (cu_seqlens_q) [total_q, H, Dv] and
    [H, total_q]."""
    if cu_seqlens_q is not None:
        total_q, heads = q.shape[0], q.shape[1]
        return (total_q, heads, v_cache.shape[3]), (heads, total_q) if return_lse else None
    batch, seqlen_q, heads = q.shape[0], q.shape[1], q.shape[2]
    return ((batch, seqlen_q, heads, v_cache.shape[3]),
            (batch, heads, seqlen_q) if return_lse else None)


def kvcache_forward(torch, q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new,
                    cu_seqlens_q, max_seqlen_q, mask, indices, slopes, predicate_tensors,
                    predicate_scalars, predicate_names, scale, window_left, window_right, softcap,
                    sinks, num_splits, return_lse, check=None, descales=(None, None)):
    """attnjit.attention_with_kvcache's launch: (o, lse or None). mask is none, causal,
    sliding_window, flashmask(...) with its vectors `indices` (else None) or predicate(...)
    with its tensors, scalar values and tensor names (space-separated; else [], [], "");
    `slopes` ALiBi's (else None); a block table makes the cache paged; cu_seqlens_q (with
    max_seqlen_q, else None and 0) packs the new tokens; descales (k_descale, v_descale) those of
    an FP8 cache (float8_e4m3fn k_cache and v_cache: kv_dtype=e4m3), each fp32 or None.
    `check(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, sinks, cu_seqlens_q,
    max_seqlen_q, indices, slopes, descales)` runs the first time a call signature is seen, as
    in forward()."""
    checked = (q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, sinks,
               cu_seqlens_q, max_seqlen_q, indices, slopes, descales)
    predicate = None
    if mask.startswith("predicate("):
        predicate = (predicate_names.split(), list(predicate_scalars), list(predicate_tensors))
    try:
        key = ("kvcache", mask, scale, window_left, window_right, softcap, num_splits,
               return_lse, max_seqlen_q, _signature(q), _signature(k_cache),
               _signature(v_cache), _signature(cache_seqlens), _signature(block_table),
               _signature(k_new), _signature(v_new), _signature(cu_seqlens_q),
               _signature(sinks), _signature(indices), _signature(slopes),
               tuple(predicate_scalars), predicate_names,
               tuple(map(_signature, predicate_tensors)), *map(_signature, descales))
    except (AttributeError, TypeError):
        if check is not None:
            check(*checked)
        raise
    call = _calls.get(key)
    if call is None:
        if check is not None:
            check(*checked)
        index = device_index((("q", q), ("k_cache", k_cache), ("v_cache", v_cache),
                              ("cache_seqlens", cache_seqlens), ("block_table", block_table),
                              ("k", k_new), ("v", v_new), ("cu_seqlens_q", cu_seqlens_q),
                              ("sinks", sinks), ("startend_row_indices", indices),
                              ("alibi_slopes", slopes), ("k_descale", descales[0]),
                              ("v_descale", descales[1]))
                             + (_predicate_named(predicate) if predicate else ()))
        spec = (f"dtype={_SPEC_DTYPES[str(q.dtype).removeprefix('torch.')]} "
                f"head_dim_qk={q.shape[-1]} head_dim_v={v_cache.shape[3]} mask={mask} "
                f"softcap={str(softcap > 0).lower()} sinks={str(sinks is not None).lower()} "
                f"alibi={str(slopes is not None).lower()} "
                f"return_lse={str(return_lse).lower()} "
                f"kv_cache={'paged' if block_table is not None else 'contiguous'}"
                + (" kv_dtype=e4m3" if str(k_cache.dtype) == "torch.float8_e4m3fn" else ""))
        compiled, _ = kernel(spec, index)
        o_shape, lse_shape = kvcache_output_shapes(q, v_cache, cu_seqlens_q, return_lse)
        o = q.new_empty(o_shape)
        lse = None if lse_shape is None else q.new_empty(lse_shape, dtype=torch.float32)
        launch = _prepare(compiled, (q, k_cache, v_cache, o, lse, indices, slopes, None, None, None,
                                     None, cu_seqlens_q, None, None, sinks, None, cache_seqlens,
                                     block_table, k_new, v_new, None, *descales), predicate,
                          (scale, window_left, window_right, softcap), index,
                          max_seqlens=(max_seqlen_q,), num_splits=num_splits)
        call = _Call(launch, index, o_shape, lse_shape)
        _remember(key, call)
    o = q.new_empty(call.o_shape)
    lse = None if call.lse_shape is None else q.new_empty(call.lse_shape, dtype=torch.float32)
    _enqueue(torch, call, (q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), o.data_ptr(),
                           None if lse is None else lse.data_ptr(),
                           None if indices is None else indices.data_ptr(),
                           None if slopes is None else slopes.data_ptr(), None, None, None, None)
             + _pointers((cu_seqlens_q, None, None, sinks, None, cache_seqlens, block_table, k_new,
                          v_new, None, *descales)), predicate_tensors)
    return o, lse


def attention_forward(torch, q, k, v, indices, slopes, mask, causal, scale, window_left,
                      window_right, softcap, sinks=None):
    """The forward of attnjit.attention: (o, lse), lse always computed for the backward."""
    return forward(torch, q, k, v, indices, slopes, mask, causal, scale, window_left,
                   window_right, softcap, True, "", sinks=sinks)


def attention_backward(torch, d_o, q, k, v, o, lse, indices, slopes, mask, causal, scale,
                       window_left, window_right, softcap, deterministic, sinks=None):
    """(d_q, d_k, d_v, d_sinks) of attnjit.attention; d_sinks (fp32 [H]) is None without
    sinks."""
    d_o = _kernel_layout(d_o)
    key = ("backward", mask, causal, deterministic, scale, window_left, window_right, softcap,
           _signature(d_o), _signature(q), _signature(k), _signature(v), _signature(o),
           _signature(lse), _signature(indices), _signature(slopes), _signature(sinks))
    call = _calls.get(key)
    if call is None:
        index = device_index((("d_o", d_o), ("q", q), ("k", k), ("v", v), ("o", o),
                              ("lse", lse), ("startend_row_indices", indices),
                              ("alibi_slopes", slopes), ("sinks", sinks)))
        spec = spec_text(q.dtype, q.shape[3], v.shape[3], mask, causal,
                         0 if indices is None else indices.shape[3], False, softcap > 0,
                         slopes is not None, True, deterministic, sinks=sinks is not None)
        compiled, _ = kernel(spec, index)
        grads = _gradients(torch, q, k, v, sinks)
        launch = _prepare(compiled, (q, k, v, o, lse, indices, slopes, d_o) + grads[:3]
                          + _NO_BOUNDARIES + (sinks, grads[3]), None,
                          (scale, window_left, window_right, softcap), index)
        call = _Call(launch, index, None, None)
        _remember(key, call)
    d_q, d_k, d_v, d_sinks = _gradients(torch, q, k, v, sinks)
    _enqueue(torch, call, (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                           lse.data_ptr(), None if indices is None else indices.data_ptr(),
                           None if slopes is None else slopes.data_ptr(), d_o.data_ptr(),
                           d_q.data_ptr(), d_k.data_ptr(), d_v.data_ptr()) + _NO_BOUNDARIES
             + _pointers((sinks, d_sinks)))
    return d_q, d_k, d_v, d_sinks


def varlen_forward(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, indices, slopes,
                   max_seqlen_q, max_seqlen_k, mask, causal, scale, window_left, window_right,
                   softcap, check=None, sinks=None, predicate=NO_PREDICATE,
                   descales=_NO_DESCALES):
    """The forward of attnjit.attention_varlen: (o [total_q, H, Dv], lse [H, total_q]).
    `mask` is "none", "causal", "sliding_window", "flashmask" (then `indices`, int32
    [1, Hm, total_k, C] with rows local to each sequence, and `causal` its flag) or an element
    predicate's "predicate(structure)" (then `predicate` its (names, scalar values, int32
    tensors [length] or [1 or B, length])); slopes (fp32 [H], shared boundaries) or None; scale
    0.0 is 1/sqrt(D), softcap 0.0 none; sinks (fp32 [H]) or None; descales (q_descale,
    k_descale, v_descale), each fp32 or None, for e4m3 inputs (o is then bf16).
    `check(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, sinks,
    indices, slopes, predicate, descales)` runs the first time a call signature is seen, as in
    forward(). Reads no tensor's values."""
    boundaries = (cu_seqlens_q, cu_seqlens_k, seqused_k)
    checked = (q, k, v) + boundaries + (max_seqlen_q, max_seqlen_k, sinks, indices, slopes,
                                        predicate, descales)
    try:
        layout = _varlen_layout(cu_seqlens_q, cu_seqlens_k, seqused_k)
        key = ("varlen", layout, mask, causal, scale, window_left, window_right, softcap,
               max_seqlen_q, max_seqlen_k) + tuple(map(_signature, (q, k, v) + boundaries
                                                       + (indices, slopes, sinks)
                                                       + tuple(descales))) \
            + _predicate_key(predicate)
    except (AttributeError, TypeError):
        if check is not None:
            check(*checked)
        raise
    call = _calls.get(key)
    if call is None:
        if check is not None:
            check(*checked)
        index = device_index((("q", q), ("k", k), ("v", v), ("startend_row_indices", indices),
                              ("alibi_slopes", slopes))
                             + tuple(zip(_SLOT_NAMES[11:], boundaries + (sinks,)))
                             + tuple(zip(_SLOT_NAMES[20:], descales))
                             + _predicate_named(predicate))
        spec = spec_text(q.dtype, q.shape[2], v.shape[2], mask, causal, _columns(indices), True,
                         softcap > 0, slopes is not None, varlen=layout, sinks=sinks is not None)
        compiled, _ = kernel(spec, index)
        total_q, heads = q.shape[0], q.shape[1]
        o_shape, lse_shape = (total_q, heads, v.shape[2]), (heads, total_q)
        o_dtype = output_dtype(torch, q)
        o = q.new_empty(o_shape, dtype=o_dtype)
        lse = q.new_empty(lse_shape, dtype=torch.float32)
        launch = _prepare(compiled, (q, k, v, o, lse, indices, slopes) + (None,) * 4
                          + boundaries + (sinks,) + _NO_CACHE + tuple(descales), predicate,
                          (scale, window_left, window_right, softcap), index,
                          (max_seqlen_q, max_seqlen_k))
        call = _Call(launch, index, o_shape, lse_shape, o_dtype)
        _remember(key, call)
    o = q.new_empty(call.o_shape, dtype=call.o_dtype)
    lse = q.new_empty(call.lse_shape, dtype=torch.float32)
    _enqueue(torch, call, (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())
             + _pointers((indices, slopes)) + (None,) * 4 + _pointers(boundaries + (sinks,))
             + _NO_CACHE + _pointers(descales), predicate[2])
    return o, lse


def varlen_backward(torch, d_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k,
                    indices, slopes, max_seqlen_q, max_seqlen_k, mask, causal, scale,
                    window_left, window_right, softcap, deterministic, sinks=None,
                    predicate=NO_PREDICATE):
    """(d_q, d_k, d_v, d_sinks) of attnjit.attention_varlen; d_sinks is None without
    sinks."""
    d_o = _kernel_layout(d_o)
    boundaries = (cu_seqlens_q, cu_seqlens_k, seqused_k)
    layout = _varlen_layout(cu_seqlens_q, cu_seqlens_k, seqused_k)
    key = ("varlen backward", layout, mask, causal, deterministic, scale, window_left,
           window_right, softcap, max_seqlen_q, max_seqlen_k) + tuple(map(
               _signature, (d_o, q, k, v, o, lse) + boundaries + (indices, slopes, sinks))) \
        + _predicate_key(predicate)
    call = _calls.get(key)
    if call is None:
        index = device_index((("d_o", d_o), ("q", q), ("k", k), ("v", v), ("o", o),
                              ("lse", lse), ("startend_row_indices", indices),
                              ("alibi_slopes", slopes))
                             + tuple(zip(_SLOT_NAMES[11:], boundaries + (sinks,)))
                             + _predicate_named(predicate))
        spec = spec_text(q.dtype, q.shape[2], v.shape[2], mask, causal, _columns(indices), False,
                         softcap > 0, slopes is not None, True, deterministic, varlen=layout,
                         sinks=sinks is not None)
        compiled, _ = kernel(spec, index)
        grads = _gradients(torch, q, k, v, sinks)
        launch = _prepare(compiled, (q, k, v, o, lse, indices, slopes, d_o) + grads[:3]
                          + boundaries + (sinks, grads[3]), predicate,
                          (scale, window_left, window_right, softcap), index,
                          (max_seqlen_q, max_seqlen_k))
        call = _Call(launch, index, None, None)
        _remember(key, call)
    d_q, d_k, d_v, d_sinks = _gradients(torch, q, k, v, sinks)
    _enqueue(torch, call, (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                           lse.data_ptr()) + _pointers((indices, slopes))
             + (d_o.data_ptr(), d_q.data_ptr(), d_k.data_ptr(), d_v.data_ptr())
             + _pointers(boundaries + (sinks, d_sinks)), predicate[2])
    return d_q, d_k, d_v, d_sinks


def _predicate_key(predicate):
    """What a call's key holds of a predicate's (names, scalar values, tensors): the prepared
    launch binds the values and the tensors' shapes."""
    names, values, tensors = predicate
    return (tuple(names), tuple(values)) + tuple(map(_signature, tensors))


def _predicate_named(predicate):
    """The (name, tensor) pairs of a predicate's tensors, named as the messages name them."""
    names, _, tensors = predicate
    return tuple((f"tensors[{name!r}]", tensor) for name, tensor in zip(names, tensors))


def _columns(indices):
    """The column count of FlashMask vectors (the last dimension), 0 without them."""
    return 0 if indices is None else indices.shape[-1]


def _varlen_layout(cu_seqlens_q, cu_seqlens_k, seqused_k):
    """The spec's varlen value of a call: "shared" when the keys take the queries' boundaries
    (one tensor for both, no seqused_k: self-attention, whose causal mask then runs by index),
    else "true"."""
    same = cu_seqlens_k is cu_seqlens_q or (
        cu_seqlens_k.data_ptr() == cu_seqlens_q.data_ptr()
        and cu_seqlens_k.shape == cu_seqlens_q.shape and cu_seqlens_k.stride() == cu_seqlens_q.stride())
    return "shared" if same and seqused_k is None else "true"


def _pointers(tensors):
    return tuple(None if t is None else t.data_ptr() for t in tensors)


def _gradients(torch, q, k, v, sinks=None):
    """d_q, d_k, d_v allocated like q, k, v (strides kept where torch keeps them), and d_sinks
    (fp32 [H], which the backward writes whole) with sinks, else None."""
    d_sinks = None if sinks is None else torch.empty_like(sinks)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), d_sinks


def predicate_forward(torch, q, k, v, tensors, scalars, structure, names, slopes, scale,
                      softcap):
    """The forward of attnjit.attention with a predicate mask: (o, lse)."""
    predicate = (names, scalars, tensors)
    index = device_index((("q", q), ("k", k), ("v", v), ("alibi_slopes", slopes))
                         + _predicate_named(predicate))
    spec = spec_text(q.dtype, q.shape[3], v.shape[3], f"predicate({structure})", False, 0, True,
                     softcap > 0, slopes is not None)
    compiled, _ = kernel(spec, index)
    batch, seqlen_q, heads = q.shape[0], q.shape[1], q.shape[2]
    o = q.new_empty((batch, seqlen_q, heads, v.shape[3]))
    lse = q.new_empty((batch, heads, seqlen_q), dtype=torch.float32)
    run(torch, compiled, (q, k, v, o, lse, None, slopes, None, None, None, None),
        (scale, -1, 0, softcap), index, predicate)
    return o, lse


def predicate_backward(torch, d_o, q, k, v, o, lse, tensors, scalars, structure, names, slopes,
                       scale, softcap, deterministic):
    """(d_q, d_k, d_v) of attnjit.attention with a predicate mask."""
    predicate = (names, scalars, tensors)
    index = device_index((("d_o", d_o), ("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse),
                          ("alibi_slopes", slopes)) + _predicate_named(predicate))
    spec = spec_text(q.dtype, q.shape[3], v.shape[3], f"predicate({structure})", False, 0, False,
                     softcap > 0, slopes is not None, True, deterministic)
    compiled, _ = kernel(spec, index)
    d_o = _kernel_layout(d_o)
    d_q, d_k, d_v, _ = _gradients(torch, q, k, v)
    run(torch, compiled, (q, k, v, o, lse, None, slopes, d_o, d_q, d_k, d_v),
        (scale, -1, 0, softcap), index, predicate)
    return d_q, d_k, d_v


def cache_counters():
    """The library's cache counters as a dict (memory_hits, disk_hits, compiles,
    memory_entries)."""
    counters = _ffi.CacheCounters()
    _ffi.check(_ffi.lib.attnjit_cache_stats(ctypes.byref(counters)))
    return {name: getattr(counters, name) for name, _ in _ffi.CacheCounters._fields_}
