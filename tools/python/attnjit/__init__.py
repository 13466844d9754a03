"""attnjit from Python: JIT-compiled fused attention (FlashAttention structure, FlashMask masks).

A thin ctypes layer over libattnjit.so. Importing it needs no PyTorch; running kernels takes
torch tensors shaped [batch, seq, heads, head_dim] on a CUDA device.

    import attnjit
    o = attnjit.forward(q, k, v, mask="causal")
    o, lse = attnjit.forward(q, k, v, mask="flashmask", causal=True,
                             startend_row_indices=lts, return_lse=True)
    o = attnjit.attention(q, k, v, mask="causal")  # differentiable: o.backward(d_o)
    mask = attnjit.flashmask("document", seqlen=8192, doc_lengths=[4096, 4096])
    o = attnjit.attention(q, k, v, mask=mask)       # a FlashMask family, built on the host
    o = attnjit.attention(q, k, v, mask="causal", softcap=30.0, alibi_slopes=slopes)
    attnjit.compile("dtype=bf16 head_dim=128 mask=causal").info()["kernels"]
"""

import ctypes
import importlib.util
import json
import math
import sys

from . import _ffi, predicates
from ._ffi import AttnjitError, DeviceError, InternalError
from .builders import FlashMask, flashmask
from .masks import FAMILIES, build_mask, mask_family, validate_intervals
from .predicates import PredicateMask, predicate

__all__ = [
    "AttnjitError",
    "DeviceError",
    "FAMILIES",
    "FlashMask",
    "InternalError",
    "Kernel",
    "attention",
    "build_mask",
    "cache_dir",
    "clear_cache",
    "compile",
    "compile_reference",
    "disk_cache",
    "flashmask",
    "forward",
    "mask_family",
    "validate_intervals",
    "predicate",
    "set_disk_cache",
    "version",
]

MASKS = ("none", "causal", "sliding_window", "flashmask")
_SPEC_DTYPES = {"float16": "fp16", "bfloat16": "bf16"}
_DTYPE_CODES = {
    "float16": _ffi.FP16,
    "bfloat16": _ffi.BF16,
    "float32": _ffi.FP32,
    "int32": _ffi.INT32,
}


def version():
    """The library's version string."""
    return _ffi.lib.attnjit_version().decode()


def cache_dir():
    """The disk cache directory: $ATTNJIT_CACHE_DIR, else $XDG_CACHE_HOME/attnjit, else
    ~/.cache/attnjit."""
    return _ffi.read_text(_ffi.lib.attnjit_cache_dir)


def clear_cache(memory=True, disk=False):
    """Forgets the kernels held in memory (by this module and the library) and/or on disk.
    Kernel objects already handed out stay valid."""
    if memory:
        _compiled.clear()
    _ffi.check(_ffi.lib.attnjit_cache_clear(int(bool(memory)), int(bool(disk))))


_DISK_CACHE_MODES = ("on", "readonly", "off")  # the order of ATTNJIT_DISK_CACHE_ON ... _OFF


def set_disk_cache(mode):
    """How this process's compiles use the disk cache, over $ATTNJIT_DISK_CACHE: "on" (read
    and write), "readonly" (load existing entries, never write) or "off"."""
    if mode not in _DISK_CACHE_MODES:
        raise AttnjitError(f"mode: got {mode!r}; accepted: {', '.join(_DISK_CACHE_MODES)}")
    _ffi.check(_ffi.lib.attnjit_set_disk_cache_mode(_DISK_CACHE_MODES.index(mode)))


def disk_cache():
    """The disk cache mode compiles use now: "on", "readonly" or "off"."""
    mode = ctypes.c_int()
    _ffi.check(_ffi.lib.attnjit_disk_cache_mode(ctypes.byref(mode)))
    return _DISK_CACHE_MODES[mode.value]


class Kernel:
    """A compiled attention (a library handle); attnjit.compile returns one."""

    def __init__(self, handle):
        self._handle = handle
        self._info = None
        self._release = _ffi.lib.attnjit_release

    @classmethod
    def compile(cls, spec):
        """Compiles `spec` through the library's memory and disk caches only (attnjit.compile
        also keeps one Kernel per spec text)."""
        return cls._build(_ffi.lib.attnjit_compile, spec)

    @classmethod
    def compile_reference(cls, spec):
        """The slow fp32 reference attention of `spec`; its run() always needs `lse`."""
        return cls._build(_ffi.lib.attnjit_compile_reference, spec)

    @classmethod
    def _build(cls, function, spec):
        if not isinstance(spec, str):
            raise TypeError(f"spec: expected a str such as 'dtype=bf16 head_dim=128', "
                            f"got {type(spec).__name__}")
        handle = ctypes.c_void_p()
        _ffi.check(function(_ffi.text_argument("spec", spec), ctypes.byref(handle)))
        return cls(handle)

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            self._release(handle)

    def info(self):
        """What the compile call did: key, spec, cache ("memory", "disk" or "miss"),
        compile_ms, and per kernel name, role, registers, spill/stack/smem bytes, threads."""
        if self._info is None:
            text = _ffi.read_text(_ffi.lib.attnjit_kernel_info, self._handle)
            self._info = json.loads(text)
        return self._info

    @property
    def spec(self):
        """The canonical spec text, with the target resolved."""
        return self.info()["spec"]

    def run(self, q, k, v, o, *, lse=None, startend_row_indices=None, scale=None,
            window=(-1, 0), softcap=None, alibi_slopes=None):
        """Enqueues the kernels on torch's current stream of q's device, writing `o` (and
        `lse`). softcap (the cap, for a spec with softcap=true) and alibi_slopes (fp32 [H], for
        a spec with alibi=true) are the score modifiers' runtime arguments. The library checks
        every tensor against the spec; attnjit.forward is the convenient form that builds the
        spec and allocates the outputs."""
        tensors = (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse),
                   ("startend_row_indices", startend_row_indices))
        self._launch(_ffi.lib.attnjit_forward_score_mod, tensors, scale, window, softcap,
                     alibi_slopes)

    def run_backward(self, q, k, v, o, d_o, lse, d_q, d_k, d_v, *, startend_row_indices=None,
                     scale=None, window=(-1, 0), softcap=None, alibi_slopes=None):
        """Enqueues the backward kernels (a spec with direction=backward) on torch's current
        stream of q's device, writing d_q, d_k and d_v from the forward's inputs, its output o,
        the gradient d_o and the lse it returned; the mask arguments, scale, softcap and
        alibi_slopes must be the forward's. attnjit.attention is the convenient,
        differentiable form."""
        tensors = (("q", q), ("k", k), ("v", v), ("o", o), ("d_o", d_o), ("lse", lse),
                   ("startend_row_indices", startend_row_indices), ("d_q", d_q), ("d_k", d_k),
                   ("d_v", d_v))
        self._launch(_ffi.lib.attnjit_backward_score_mod, tensors, scale, window, softcap,
                     alibi_slopes)

    def _launch(self, function, tensors, scale, window, softcap, alibi_slopes):
        q = tensors[0][1]
        torch = _torch_of(q, "q")
        softmax_scale = _check_scale(scale)
        window_left, window_right = _check_window(window)
        cap = _check_softcap(softcap)
        descriptors = [_descriptor(name, tensor) for name, tensor in tensors]
        pointers = [None if d is None else ctypes.byref(d) for d in descriptors]
        slopes = _descriptor("alibi_slopes", alibi_slopes)
        with torch.cuda.device(q.device):
            stream = torch.cuda.current_stream(q.device).cuda_stream
            _ffi.check(function(self._handle, *pointers, softmax_scale, window_left,
                                window_right, cap, None if slopes is None else ctypes.byref(slopes),
                                stream))


_compiled = {}


def compile(spec):
    """The Kernel of a spec text such as "dtype=bf16 head_dim=128 mask=causal"; compiled
    once per process and spec text."""
    kernel = _compiled.get(spec)
    if kernel is None:
        kernel = Kernel.compile(spec)
        _compiled[spec] = kernel
    return kernel


def compile_reference(spec):
    """The slow fp32 reference attention of `spec`, for checking results."""
    return Kernel.compile_reference(spec)


def forward(q, k, v, *, spec=None, mask="none", causal=False, startend_row_indices=None,
            scale=None, window=(-1, 0), return_lse=False, softcap=None, alibi_slopes=None):
    """Attention forward, softmax(q k^T * scale + mask) v, on torch tensors [B, S, H, D].

    q [B, Sq, H, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv]: bf16 or fp16, on one CUDA device,
    last dimension contiguous; H a multiple of Hkv. mask: "none", "causal" (bottom-right
    aligned), "sliding_window" (window=(left, right), -1 unbounded) or "flashmask" (causal=
    and the int32 startend_row_indices [B, Hm, Sk, C]). causal=True with mask="none" means
    mask="causal". scale defaults to 1/sqrt(D). Score modifiers, applied to s = scale * q.k
    before the mask (soft-capping first): softcap=cap gives s <- cap * tanh(s / cap);
    alibi_slopes (fp32 [H] on q's device) gives s <- s + slope[h] * (j - (i + Sk - Sq)); each
    adds its flag to the spec (a spec given as `spec` must carry them). `spec` replaces the
    spec built from these arguments (e.g. to force tiles=...): mask, causal and return_lse
    then stay at their defaults and the outputs follow the spec's return_lse. Returns
    o [B, Sq, H, Dv], and also lse fp32 [B, H, Sq] when return_lse. Runs on torch's current
    stream, asynchronously.
    mask may also be a FlashMask from attnjit.flashmask(), which holds causal= and the vectors.
    """
    if isinstance(mask, FlashMask):
        mask, causal, startend_row_indices = mask.attention_arguments(q, causal,
                                                                      startend_row_indices)
    if spec is None:
        _check_mask_arguments(mask, causal, startend_row_indices)
        if not isinstance(return_lse, bool):
            raise TypeError(f"return_lse: expected a bool, got {type(return_lse).__name__}")
    elif not isinstance(spec, str):
        raise TypeError(f"spec: expected a str, got {type(spec).__name__}")
    elif mask != "none" or causal is not False or return_lse is not False:
        raise ValueError("spec: given together with mask/causal/return_lse; accepted: either "
                         "a spec or those arguments (the spec says them)")
    _check_scale(scale)
    _check_window(window)
    _check_softcap(softcap)

    torch = _torch_of(q, "q")
    _check_activations(q, k, v)
    if startend_row_indices is not None:
        _check_startend(torch, startend_row_indices, q, k)
    if alibi_slopes is not None:
        _check_alibi_slopes(torch, alibi_slopes, q)
    if spec is None:
        spec = _spec_text(q, v, mask, causal, startend_row_indices, return_lse, softcap,
                          alibi_slopes)
    kernel = compile(spec)
    with_lse = "return_lse=true" in kernel.spec.split()

    batch, seqlen_q, heads = q.shape[0], q.shape[1], q.shape[2]
    o = torch.empty((batch, seqlen_q, heads, v.shape[3]), dtype=q.dtype, device=q.device)
    lse = None
    if with_lse:
        lse = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
    kernel.run(q, k, v, o, lse=lse, startend_row_indices=startend_row_indices, scale=scale,
               window=window, softcap=softcap, alibi_slopes=alibi_slopes)
    return (o, lse) if with_lse else o


def attention(q, k, v, *, mask="none", causal=False, startend_row_indices=None, scale=None,
              window=(-1, 0), return_lse=False, deterministic=False, softcap=None,
              alibi_slopes=None):
    """Differentiable attention: the arguments and results of attnjit.forward (without spec=),
    as a torch.autograd.Function whose backward pass runs attnjit's backward kernels.

    The forward pass always computes the LSE, which the backward pass needs; with
    return_lse=True it is also returned (fp32 [B, H, Sq], not differentiable).
    deterministic=True makes the gradients bitwise identical from run to run (a slower dQ
    reduction). q, k and v receive d_q, d_k and d_v (with GQA, a KV head's gradient sums over
    its query heads); the mask vectors and alibi_slopes get none. A d_o whose layout the
    kernels do not take (e.g. the expanded gradient of o.sum()) is copied to a contiguous
    tensor first. Runs on torch's current stream, asynchronously. softcap and alibi_slopes as
    in attnjit.forward. mask may also be an attnjit.predicate(...) (then without causal,
    startend_row_indices and window).
    """
    predicate_mask = mask if isinstance(mask, PredicateMask) else None
    if predicate_mask is not None:
        if causal is not False or startend_row_indices is not None or tuple(window) != (-1, 0):
            raise ValueError("mask: a predicate with causal/startend_row_indices/window; "
                             "accepted: a predicate alone (it says the whole mask)")
        mask = "none"
    if isinstance(mask, FlashMask):
        mask, causal, startend_row_indices = mask.attention_arguments(q, causal,
                                                                      startend_row_indices)
    _check_mask_arguments(mask, causal, startend_row_indices)
    for name, value in (("return_lse", return_lse), ("deterministic", deterministic)):
        if not isinstance(value, bool):
            raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    _check_scale(scale)
    _check_window(window)
    _check_softcap(softcap)

    torch = _torch_of(q, "q")
    _check_activations(q, k, v)
    if alibi_slopes is not None:
        _check_alibi_slopes(torch, alibi_slopes, q)
    if predicate_mask is not None:
        return predicates.attention(torch, q, k, v, predicate_mask, scale, return_lse,
                                    deterministic, softcap, alibi_slopes)
    if startend_row_indices is not None:
        _check_startend(torch, startend_row_indices, q, k)
    modifiers = (softcap, alibi_slopes)
    forward_spec = _spec_text(q, v, mask, causal, startend_row_indices, True, *modifiers)
    backward_spec = (f"{_spec_text(q, v, mask, causal, startend_row_indices, False, *modifiers)}"
                     f" direction=backward deterministic={str(deterministic).lower()}")
    o, lse = _attention_function(torch).apply(q, k, v, startend_row_indices, forward_spec,
                                              backward_spec, scale, tuple(window), softcap,
                                              alibi_slopes)
    return (o, lse) if return_lse else o


_function = None


def _attention_function(torch):
    """The torch.autograd.Function behind attention(), defined on first use so that importing
    attnjit needs no PyTorch."""
    global _function
    if _function is None:
        _function = _define_attention_function(torch)
    return _function


def _define_attention_function(torch):
    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, indices, forward_spec, backward_spec, scale, window, softcap,
                    slopes):
            batch, seqlen_q, heads = q.shape[0], q.shape[1], q.shape[2]
            o = torch.empty((batch, seqlen_q, heads, v.shape[3]), dtype=q.dtype,
                            device=q.device)
            lse = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
            compile(forward_spec).run(q, k, v, o, lse=lse, startend_row_indices=indices,
                                      scale=scale, window=window, softcap=softcap,
                                      alibi_slopes=slopes)
            ctx.save_for_backward(q, k, v, o, lse, indices, slopes)
            ctx.backward_spec = backward_spec
            ctx.scale = scale
            ctx.window = window
            ctx.softcap = softcap
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, d_o, _d_lse):
            q, k, v, o, lse, indices, slopes = ctx.saved_tensors
            if not _is_kernel_layout(d_o):
                d_o = d_o.contiguous()
            d_q, d_k, d_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            compile(ctx.backward_spec).run_backward(
                q, k, v, o, d_o, lse, d_q, d_k, d_v, startend_row_indices=indices,
                scale=ctx.scale, window=ctx.window, softcap=ctx.softcap, alibi_slopes=slopes)
            return d_q, d_k, d_v, None, None, None, None, None, None, None

    return Attention


def _is_kernel_layout(tensor):
    """Whether the kernels take `tensor` as it is: last dimension contiguous, the other strides
    whole 16-byte rows (multiples of 8 elements), a 16-byte aligned start."""
    strides = tensor.stride()
    return (strides[-1] == 1 and all(stride % 8 == 0 for stride in strides[:-1])
            and tensor.data_ptr() % 16 == 0)


def _check_mask_arguments(mask, causal, indices):
    if mask not in MASKS:
        raise ValueError(f"mask: got {mask!r}; accepted: {', '.join(MASKS)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {type(causal).__name__}")
    if causal and mask == "sliding_window":
        raise ValueError("causal: got True with mask='sliding_window'; accepted: False "
                         "(a causal window is window=(left, 0))")
    if mask == "flashmask" and indices is None:
        raise ValueError("startend_row_indices: got None with mask='flashmask'; accepted: an "
                         "int32 tensor [B, Hm, Sk, C]")
    if mask != "flashmask" and indices is not None:
        raise ValueError(f"startend_row_indices: given with mask={mask!r}; accepted: None "
                         "(it belongs to mask='flashmask')")


def _check_scale(scale):
    """The softmax scale for the library: 0.0 (its 1/sqrt(D) default) for None."""
    if scale is None:
        return 0.0
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale: expected a float or None, got {type(scale).__name__}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale: got {scale}; accepted: a finite number > 0, or None for "
                         "1/sqrt(head_dim)")
    return float(scale)


def _check_softcap(softcap):
    """The cap for the library: 0.0 (no soft-capping) for None."""
    if softcap is None:
        return 0.0
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"softcap: expected a float or None, got {type(softcap).__name__}")
    if not math.isfinite(softcap) or softcap <= 0:
        raise ValueError(f"softcap: got {softcap}; accepted: a finite number > 0, or None for "
                         "no soft-capping")
    return float(softcap)


def _check_alibi_slopes(torch, slopes, q):
    _torch_of(slopes, "alibi_slopes")
    heads = q.shape[2]
    if slopes.dtype != torch.float32:
        raise TypeError(f"alibi_slopes: dtype {slopes.dtype}; accepted: torch.float32")
    if slopes.device != q.device:
        raise ValueError(f"alibi_slopes: on {slopes.device} but q is on {q.device}; accepted: "
                         "q's device")
    if tuple(slopes.shape) != (heads,):
        raise ValueError(f"alibi_slopes: shape {tuple(slopes.shape)}; accepted: [H={heads}], "
                         "one slope per query head")
    if not slopes.is_contiguous():
        raise ValueError("alibi_slopes: not contiguous; accepted: a contiguous tensor (call "
                         ".contiguous())")


def _check_window(window):
    is_int = [isinstance(w, int) and not isinstance(w, bool) for w in window] \
        if isinstance(window, (tuple, list)) else []
    if len(is_int) != 2 or not all(is_int):
        raise TypeError(f"window: expected a pair of ints (left, right), got {window!r}")
    if min(window) < -1:
        raise ValueError(f"window: got {tuple(window)}; accepted: sizes >= 0, or -1 for "
                         "unbounded")
    return (_ffi.int_argument("window[0]", window[0]), _ffi.int_argument("window[1]", window[1]))


def _torch_of(tensor, name):
    """The torch module of a tensor argument; TypeError naming the argument if it is none."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(tensor, torch.Tensor):
        note = ""
        if importlib.util.find_spec("torch") is None:
            note = " (PyTorch is not installed; attnjit needs it to run kernels)"
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}{note}")
    return torch


def _dtype_name(tensor):
    return str(tensor.dtype).removeprefix("torch.")


def _descriptor(name, tensor):
    """The attnjit_tensor of a torch tensor (None stays None)."""
    if tensor is None:
        return None
    _torch_of(tensor, name)
    if tensor.device.type != "cuda":
        raise ValueError(f"{name}: on device {tensor.device}; accepted: a CUDA device")
    code = _DTYPE_CODES.get(_dtype_name(tensor))
    if code is None:
        accepted = ", ".join("torch." + dtype for dtype in _DTYPE_CODES)
        raise TypeError(f"{name}: dtype {tensor.dtype}; accepted: {accepted}")
    rank = tensor.dim()
    if rank > 4:
        raise ValueError(f"{name}: rank {rank}; accepted: at most 4")
    padding = [0] * (4 - rank)
    return _ffi.Tensor(tensor.data_ptr(), code, rank,
                       (ctypes.c_int64 * 4)(*tensor.shape, *padding),
                       (ctypes.c_int64 * 4)(*tensor.stride(), *padding))


def _check_activations(q, k, v):
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        _torch_of(tensor, name)
        if tensor.device.type != "cuda":
            raise ValueError(f"{name}: on device {tensor.device}; accepted: a CUDA device")
        if tensor.device != q.device:
            raise ValueError(f"{name}: on {tensor.device} but q is on {q.device}; accepted: "
                             "q's device")
        if _dtype_name(tensor) not in _SPEC_DTYPES:
            raise TypeError(f"{name}: dtype {tensor.dtype}; accepted: torch.bfloat16, "
                            "torch.float16")
        if tensor.dtype != q.dtype:
            raise TypeError(f"{name}: dtype {tensor.dtype} but q is {q.dtype}; accepted: one "
                            "dtype for q, k and v")
        if tensor.dim() != 4:
            raise ValueError(f"{name}: rank {tensor.dim()} (shape {tuple(tensor.shape)}); "
                             "accepted: 4, [batch, seq, heads, head_dim]")
        if tensor.stride(-1) != 1:
            raise ValueError(f"{name}: last dimension has stride {tensor.stride(-1)}; "
                             "accepted: 1 (contiguous head_dim)")
    if tuple(k.shape[:3]) != tuple(v.shape[:3]):
        raise ValueError(f"v: shape {tuple(v.shape)} differs from k {tuple(k.shape)} in "
                         "[batch, seq, heads]")
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(f"k: shape {tuple(k.shape)} differs from q {tuple(q.shape)} in batch "
                         "or head_dim")


def _check_startend(torch, indices, q, k):
    _torch_of(indices, "startend_row_indices")
    shape = tuple(indices.shape)
    if indices.dtype != torch.int32:
        raise TypeError(f"startend_row_indices: dtype {indices.dtype}; accepted: torch.int32")
    if indices.device != q.device:
        raise ValueError(f"startend_row_indices: on {indices.device} but q is on {q.device}; "
                         "accepted: q's device")
    batch, seqlen_k = k.shape[0], k.shape[1]
    if len(shape) != 4 or shape[0] != batch or shape[2] != seqlen_k or shape[3] not in (1, 2, 4):
        raise ValueError(f"startend_row_indices: shape {shape}; accepted: [B={batch}, Hm, "
                         f"Sk={seqlen_k}, C] with C in 1, 2, 4")
    if not indices.is_contiguous():
        raise ValueError("startend_row_indices: not contiguous; accepted: a contiguous tensor "
                         "(call .contiguous())")


def _spec_text(q, v, mask, causal, indices, return_lse, softcap, alibi_slopes):
    if mask == "none" and causal:
        mask = "causal"
    if mask == "flashmask":
        mask = f"flashmask(causal={str(causal).lower()},columns={indices.shape[3]})"
    return (f"dtype={_SPEC_DTYPES[_dtype_name(q)]} head_dim_qk={q.shape[3]} "
            f"head_dim_v={v.shape[3]} mask={mask} return_lse={str(return_lse).lower()} "
            f"softcap={str(softcap is not None).lower()} "
            f"alibi={str(alibi_slopes is not None).lower()}")
