"""attnjit from Python: JIT-compiled fused attention (FlashAttention structure, FlashMask masks).

A thin ctypes layer over libattnjit.so. Importing it needs no PyTorch (where PyTorch is
installed it is imported too, and with PyTorch 2.4 or newer the torch.ops.attnjit custom
operators are defined, which torch.compile traces); running kernels takes torch tensors shaped
[batch, seq, heads, head_dim] on a CUDA device, any CUDA device of the process. The examples
marked GPU below use q, k and v such as these:

>>> import torch                                                          # doctest: +GPU
>>> q = torch.randn(2, 1024, 8, 128, device="cuda", dtype=torch.bfloat16)  # doctest: +GPU
>>> k = torch.randn(2, 1024, 2, 128, device="cuda", dtype=torch.bfloat16)  # doctest: +GPU
>>> v = torch.randn(2, 1024, 2, 128, device="cuda", dtype=torch.bfloat16)  # doctest: +GPU
>>> o = attnjit.forward(q, k, v, mask="causal")                            # doctest: +GPU
>>> o = attnjit.attention(q, k, v, mask="causal")  # differentiable        # doctest: +GPU
>>> mask = attnjit.flashmask("document", seqlen=1024, batch=2, doc_lengths=[512, 512])
>>> o = attnjit.attention(q, k, v, mask=mask)  # a FlashMask family        # doctest: +GPU
>>> o = attnjit.attention(q, k, v, mask=attnjit.predicate("q >= k && q - k < 256"))  # doctest: +GPU

Packed batches (FlashAttention's varlen form) take [total, heads, head_dim] tensors and the
sequences' boundaries: attnjit.attention_varlen.

Without a GPU the package still builds masks and compiles kernels:

>>> kernel = attnjit.compile("dtype=bf16 head_dim=128 mask=causal target=sm_90a")
>>> [k["role"] for k in kernel.info()["kernels"]]
['forward']
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import math
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

from . import _ffi, _launch, fp8
from ._ffi import AttnjitError, DeviceError, InternalError
from .builders import FlashMask, flashmask
from .masks import FAMILIES, build_mask, mask_family, validate_intervals
from .predicates import PredicateMask, predicate

if TYPE_CHECKING:
    from torch import Tensor

Mask = Union[str, FlashMask, PredicateMask]

__all__ = [
    "AttnjitError",
    "DeviceError",
    "FAMILIES",
    "FlashMask",
    "InternalError",
    "Kernel",
    "PredicateMask",
    "attention",
    "attention_varlen",
    "attention_with_kvcache",
    "build_mask",
    "cache_dir",
    "cache_stats",
    "clear_cache",
    "compile",
    "compile_reference",
    "disk_cache",
    "flashmask",
    "forward",
    "fp8",
    "mask_family",
    "validate_intervals",
    "predicate",
    "set_disk_cache",
    "version",
]

MASKS = ("none", "causal", "sliding_window", "flashmask")
_DTYPE_CODES = {
    "float16": _ffi.FP16,
    "bfloat16": _ffi.BF16,
    "float32": _ffi.FP32,
    "int32": _ffi.INT32,
}


def version() -> str:
    """The library's version string (also attnjit.__version__).

    >>> attnjit.version() == attnjit.__version__
    True
    """
    return _ffi.lib.attnjit_version().decode()


__version__ = version()


def cache_dir() -> str:
    """The disk cache directory: $ATTNJIT_CACHE_DIR, else $XDG_CACHE_HOME/attnjit, else
    ~/.cache/attnjit."""
    return _ffi.read_text(_ffi.lib.attnjit_cache_dir)


def clear_cache(memory: bool = True, disk: bool = False) -> None:
    """Forgets the kernels held in memory (by this module and the library) and/or on disk.
    Kernel objects already handed out stay valid."""
    if memory:
        _compiled.clear()
    _ffi.check(_ffi.lib.attnjit_cache_clear(int(bool(memory)), int(bool(disk))))


_DISK_CACHE_MODES = ("on", "readonly", "off")  # the order of ATTNJIT_DISK_CACHE_ON ... _OFF


def set_disk_cache(mode: str) -> None:
    """How this process's compiles use the disk cache, over $ATTNJIT_DISK_CACHE: "on" (read
    and write), "readonly" (load existing entries, never write) or "off"."""
    if mode not in _DISK_CACHE_MODES:
        raise AttnjitError(f"mode: got {mode!r}; accepted: {', '.join(_DISK_CACHE_MODES)}")
    _ffi.check(_ffi.lib.attnjit_set_disk_cache_mode(_DISK_CACHE_MODES.index(mode)))


def disk_cache() -> str:
    """The disk cache mode compiles use now: "on", "readonly" or "off"."""
    mode = ctypes.c_int()
    _ffi.check(_ffi.lib.attnjit_disk_cache_mode(ctypes.byref(mode)))
    return _DISK_CACHE_MODES[mode.value]


class Kernel:
    """A compiled attention (a library handle); attnjit.compile returns one.

    >>> kernel = attnjit.compile("dtype=fp16 head_dim=64 mask=predicate(q>=k&&q-k<64) "
    ...                          "target=sm_80")
    >>> kernel
    Kernel('dtype=fp16 ... mask=predicate(q>=k&&q-k<$0) ... target=sm_80 tiles=auto',
           kernels=['attnjit_predicate_blocks_...', 'attnjit_cta_order_...',
                    'attnjit_fwd_fp16_d64_predicate'])
    >>> kernel.info()["predicate_scalars"]
    [64]
    >>> kernel.ptx()[2].count(".entry attnjit_fwd_fp16_d64_predicate")
    1
    """

    def __init__(self, handle: ctypes.c_void_p):
        self._handle = handle
        self._info = None
        self._release = _ffi.lib.attnjit_release

    @classmethod
    def compile(cls, spec: str) -> Kernel:
        """Compiles `spec` through the library's memory and disk caches only (attnjit.compile
        also keeps one Kernel per spec text)."""
        return cls._build(_ffi.lib.attnjit_compile, spec)

    @classmethod
    def compile_reference(cls, spec: str) -> Kernel:
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

    def __repr__(self) -> str:
        names = [kernel["name"] for kernel in self.info()["kernels"]]
        return f"Kernel({self.spec!r}, kernels={names})"

    def info(self) -> Dict[str, Any]:
        """What the compile call did: key, spec, cache ("memory", "disk" or "miss"),
        compile_ms, per kernel name, role, registers, spill/stack/smem bytes, threads, and
        predicate_scalars (the values of the spec text's predicate literals, which run() passes
        as the scalars)."""
        if self._info is None:
            text = _ffi.read_text(_ffi.lib.attnjit_kernel_info, self._handle)
            self._info = json.loads(text)
        return self._info

    @property
    def spec(self) -> str:
        """The canonical spec text, with the target resolved (a predicate's literals lifted)."""
        return self.info()["spec"]

    def ptx(self) -> List[str]:
        """The PTX of each kernel, in the order of info()["kernels"]."""
        return [_ffi.read_text(_ffi.lib.attnjit_kernel_ptx, self._handle, index)
                for index in range(len(self.info()["kernels"]))]

    def run(self, q: Tensor, k: Tensor, v: Tensor, o: Tensor, *, lse: Optional[Tensor] = None,
            startend_row_indices: Optional[Tensor] = None, scale: Optional[float] = None,
            window: Tuple[int, int] = (-1, 0), softcap: Optional[float] = None,
            alibi_slopes: Optional[Tensor] = None) -> None:
        """Enqueues the kernels on torch's current stream of q's device, writing `o` (and
        `lse`). softcap (the cap, for a spec with softcap=true) and alibi_slopes (fp32 [H], for
        a spec with alibi=true) are the score modifiers' runtime arguments. A spec with
        mask=predicate(...) runs with the values of its literals and reads no tensors. The
        library checks every tensor against the spec; attnjit.forward is the convenient form
        that builds the spec and allocates the outputs."""
        tensors = (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse),
                   ("startend_row_indices", startend_row_indices))
        self._launch(_ffi.lib.attnjit_forward_score_mod, tensors, scale, window, softcap,
                     alibi_slopes)

    def run_backward(self, q: Tensor, k: Tensor, v: Tensor, o: Tensor, d_o: Tensor,
                     lse: Tensor, d_q: Tensor, d_k: Tensor, d_v: Tensor, *,
                     startend_row_indices: Optional[Tensor] = None,
                     scale: Optional[float] = None, window: Tuple[int, int] = (-1, 0),
                     softcap: Optional[float] = None,
                     alibi_slopes: Optional[Tensor] = None) -> None:
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
        # The library runs on the device holding q (attnjit.h); the stream is torch's current
        # one there, read at this call (also inside a CUDA graph capture).
        stream = _launch.stream_of(torch, q.get_device())
        _ffi.check(function(self._handle, *pointers, softmax_scale, window_left, window_right,
                            cap, None if slopes is None else ctypes.byref(slopes), stream))


_compiled = {}


def compile(spec: str) -> Kernel:
    """The Kernel of a spec text such as "dtype=bf16 head_dim=128 mask=causal"; compiled
    once per process and spec text. Without target= in the spec it compiles for the current
    GPU (DeviceError without one).

    >>> attnjit.compile("dtype=bf16 head_dim=64 mask=causal target=sm_80").spec
    'dtype=bf16 head_dim_qk=64 head_dim_v=64 mask=causal ... target=sm_80 tiles=auto'
    """
    kernel = _compiled.get(spec)
    if kernel is None:
        kernel = Kernel.compile(spec)
        _compiled[spec] = kernel
    return kernel


def compile_reference(spec: str) -> Kernel:
    """The slow fp32 reference attention of `spec`, for checking results."""
    return Kernel.compile_reference(spec)


def forward(q: Tensor, k: Tensor, v: Tensor, *, spec: Optional[str] = None, mask: Mask = "none",
            causal: bool = False, startend_row_indices: Optional[Tensor] = None,
            scale: Optional[float] = None, window: Tuple[int, int] = (-1, 0),
            return_lse: bool = False, softcap: Optional[float] = None,
            alibi_slopes: Optional[Tensor] = None, sinks: Optional[Tensor] = None,
            q_descale: Optional[Tensor] = None, k_descale: Optional[Tensor] = None,
            v_descale: Optional[Tensor] = None) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Attention forward, softmax(q k^T * scale + mask) v, on torch tensors [B, S, H, D].

    q [B, Sq, H, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv]: bf16 or fp16, on one CUDA device,
    last dimension contiguous; H a multiple of Hkv. Or FP8: q, k and v torch.float8_e4m3fn on
    an sm_90 GPU (head dims 64, 128, 256; masks "none", "causal", "sliding_window" and
    "flashmask"), with
    q_descale, k_descale and v_descale (fp32 [B, Hkv] or [1], FlashAttention-3's: the values
    the bytes stand for are the bytes times these; None: 1; attnjit.fp8.quantize makes them);
    o is then bf16. mask: "none", "causal" (bottom-right
    aligned), "sliding_window" (window=(left, right), -1 unbounded) or "flashmask" (causal=
    and the int32 startend_row_indices [B, Hm, Sk, C]); or a mask object: an attnjit.flashmask()
    (it holds causal= and the vectors) or an attnjit.predicate() (alone: no causal,
    startend_row_indices or window). causal=True with mask="none" means mask="causal". scale
    defaults to 1/sqrt(D). Score modifiers, applied to s = scale * q.k before the mask
    (soft-capping first): softcap=cap gives s <- cap * tanh(s / cap); alibi_slopes (fp32 [H] on
    q's device) gives s <- s + slope[h] * (j - (i + Sk - Sq)); each adds its flag to the spec
    (a spec given as `spec` must carry them). sinks (fp32 [H] on q's device, gpt-oss's
    learnable sinks) adds a logit t[h] per query head to each row's softmax denominator, with
    no value: o = sum_j exp(s_j - L) v_j with L = log(sum_j exp(s_j) + exp(t[h])), the returned
    lse is L, and a row that sees no key gives o = 0 and lse = t[h] (spec flag sinks=true; not
    with predicate masks). `spec` replaces the spec built from these
    arguments (e.g. to force tiles=...): mask, causal and return_lse then stay at their
    defaults and the outputs follow the spec's return_lse (a spec with mask=predicate(...)
    runs with its literals and reads no tensors). Returns o [B, Sq, H, Dv], and also lse fp32
    [B, H, Sq] when return_lse. Runs on torch's current stream, asynchronously; records no
    autograd graph (attnjit.attention does).

    >>> o = attnjit.forward(q, k, v, mask="sliding_window", window=(255, 0))  # doctest: +GPU
    >>> o, lse = attnjit.forward(q, k, v, mask=attnjit.predicate("q >= k && q - k < 256"),
    ...                          return_lse=True)                            # doctest: +GPU
    """
    descales = (q_descale, k_descale, v_descale)
    mask = _mask_object(mask, q, k)
    if isinstance(mask, PredicateMask):
        # The other paths check the descales with the tensors (_check_tensors).
        if _is_fp8(q) or any(d is not None for d in descales):
            raise AttnjitError("mask: a predicate mask with torch.float8_e4m3fn inputs or "
                               "descales; accepted: \"none\", \"causal\", "
                               "\"sliding_window\" or FlashMask vectors for e4m3 inputs")
        if spec is not None:
            raise ValueError("spec: given together with a predicate mask; accepted: either a "
                             "spec or a mask (a spec's mask=predicate(...) reads no tensors)")
        _check_predicate_alone(causal, startend_row_indices, window)
        _refuse_predicate_sinks(sinks)
        if not isinstance(return_lse, bool):
            raise TypeError(f"return_lse: expected a bool, got {type(return_lse).__name__}")
        o, lse = _predicate_call(q, k, v, mask, alibi_slopes, _check_scale(scale),
                                 _check_softcap(softcap), deterministic=False, graph=False)
        return (o, lse) if return_lse else o
    if isinstance(mask, FlashMask):
        mask, causal, startend_row_indices = mask.attention_arguments(q, causal,
                                                                      startend_row_indices)
    if spec is None:
        _check_mask_arguments(mask, causal, startend_row_indices)
        if not isinstance(return_lse, bool):
            raise TypeError(f"return_lse: expected a bool, got {type(return_lse).__name__}")
        with_lse = return_lse
    elif not isinstance(spec, str):
        raise TypeError(f"spec: expected a str, got {type(spec).__name__}")
    elif mask != "none" or causal is not False or return_lse is not False:
        raise ValueError("spec: given together with mask/causal/return_lse; accepted: either "
                         "a spec or those arguments (the spec says them)")
    else:
        with_lse = "return_lse=true" in spec.split()
    scale_value = _check_scale(scale)
    window_left, window_right = _check_window(window)
    cap = _check_softcap(softcap)
    arguments = (q, k, v, startend_row_indices, alibi_slopes, mask, causal, scale_value,
                 window_left, window_right, cap)
    if _through_operators(q):
        _check_forward_tensors(q, k, v, startend_row_indices, alibi_slopes, sinks, descales)
        o, lse = _ops.forward(*arguments, with_lse, spec or "", sinks, *descales)
    else:
        # The tensor checks run inside, once per call signature (shapes, strides, dtypes,
        # devices): a repeated call costs only its launch.
        o, lse = _launch.forward(_torch_of(q, "q"), *arguments, with_lse, spec or "",
                                 _check_forward_tensors, sinks, descales)
    return (o, lse) if with_lse else o


def attention(q: Tensor, k: Tensor, v: Tensor, *, mask: Mask = "none", causal: bool = False,
              startend_row_indices: Optional[Tensor] = None, scale: Optional[float] = None,
              window: Tuple[int, int] = (-1, 0), return_lse: bool = False,
              deterministic: bool = False, softcap: Optional[float] = None,
              alibi_slopes: Optional[Tensor] = None,
              sinks: Optional[Tensor] = None) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Differentiable attention: the arguments and results of attnjit.forward (without spec=),
    with a backward pass that runs attnjit's backward kernels (the torch.ops.attnjit.attention
    operator and its autograd formula: torch.compile traces it without a graph break).

    The forward pass always computes the LSE, which the backward pass needs; with
    return_lse=True it is also returned (fp32 [B, H, Sq], not differentiable).
    deterministic=True makes the gradients bitwise identical from run to run (a slower dQ
    reduction). q, k and v receive d_q, d_k and d_v (with GQA, a KV head's gradient sums over
    its query heads), and sinks, when given, its gradient d t[h] = -sum_i exp(t[h] - L_i) D_i
    over the rows of head h (D_i = rowsum(d_o * o)), summed in a fixed order (bitwise
    repeatable in both modes); the mask vectors and alibi_slopes get none. A d_o whose layout
    the kernels do not take (e.g. the expanded gradient of o.sum()) is copied to a contiguous
    tensor first. Runs on torch's current stream, asynchronously. mask, softcap, alibi_slopes
    and sinks as in attnjit.forward.

    >>> q, k, v = (t.detach().requires_grad_() for t in (q, k, v))    # doctest: +GPU
    >>> o = attnjit.attention(q, k, v, mask="causal", deterministic=True)  # doctest: +GPU
    >>> o.sum().backward()                                              # doctest: +GPU
    >>> q.grad.shape == q.shape                                       # doctest: +GPU
    True
    """
    mask = _mask_object(mask, q, k)
    for name, value in (("return_lse", return_lse), ("deterministic", deterministic)):
        if not isinstance(value, bool):
            raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    if isinstance(mask, PredicateMask):
        _check_predicate_alone(causal, startend_row_indices, window)
        _refuse_predicate_sinks(sinks)
        o, lse = _predicate_call(q, k, v, mask, alibi_slopes, _check_scale(scale),
                                 _check_softcap(softcap), deterministic, graph=True)
        return (o, lse) if return_lse else o
    if isinstance(mask, FlashMask):
        mask, causal, startend_row_indices = mask.attention_arguments(q, causal,
                                                                      startend_row_indices)
    _check_mask_arguments(mask, causal, startend_row_indices)
    scale_value = _check_scale(scale)
    window_left, window_right = _check_window(window)
    cap = _check_softcap(softcap)
    operators = _through_operators(q)
    if operators:
        _check_tensors(q, k, v, startend_row_indices, alibi_slopes, sinks)
    else:
        _torch_of(q, "q")  # the tensor checks run in the launch, once per call signature
    arguments = (q, k, v, startend_row_indices, alibi_slopes, mask, causal, scale_value,
                 window_left, window_right, cap, deterministic, sinks)
    if operators:
        o, lse = _ops.attention(*arguments)
    else:
        o, lse = _functions()[0].apply(*arguments)
    return (o, lse) if return_lse else o


def attention_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor,
                          cache_seqlens: Optional[Tensor] = None,
                          block_table: Optional[Tensor] = None, *, k: Optional[Tensor] = None,
                          v: Optional[Tensor] = None, causal: bool = False,
                          window_size: Tuple[int, int] = (-1, -1),
                          softmax_scale: Optional[float] = None, softcap: Optional[float] = None,
                          sinks: Optional[Tensor] = None, num_splits: Optional[int] = 0,
                          return_lse: bool = False, cu_seqlens_q: Optional[Tensor] = None,
                          max_seqlen_q: Optional[int] = None,
                          startend_row_indices: Optional[Tensor] = None,
                          alibi_slopes: Optional[Tensor] = None,
                          mask: Optional[PredicateMask] = None,
                          k_descale: Optional[Tensor] = None,
                          v_descale: Optional[Tensor] = None
                          ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Attention of new query tokens against a KV cache (decoding, appends, chunked prefill;
    FlashAttention's flash_attn_with_kvcache), forward only.

    q [B, Sq, H, D] holds each sequence's Sq new tokens, the last Sq of its keys. A contiguous
    cache is k_cache [B, capacity, Hkv, D] and v_cache [B, capacity, Hkv, Dv]; with block_table
    (int32 [B, max_pages]) the caches are page pools [num_pages, page_size, Hkv, D] (page_size a
    power of two; pass an HND pool [num_pages, Hkv, page_size, D] as .transpose(1, 2)).
    cache_seqlens (int32 [B]) gives the keys of each sequence (None: the whole capacity). k and v
    ([B, S_new, Hkv, D] and [.., Dv]), when given, are first written into the caches at positions
    cache_seqlens[b] .. cache_seqlens[b] + S_new - 1 (required then; not updated), and the
    attention covers cache_seqlens[b] + S_new keys.
    causal=True and window_size=(left, right) (-1: unbounded) are aligned to the bottom right of
    each sequence's keys. num_splits: key splits per sequence and KV head (0 or None chooses
    from the SM count and the shapes; there, on sm_90a with pages of at least 8 keys, calls
    with many new tokens run the sm90a forward over the cache instead of the decode kernel,
    which a split count keeps). sinks: fp32 [H]
    sink logits. Returns o [B, Sq, H, Dv],
    and the LSE (fp32 [B, H, Sq]) with return_lse=True. New lengths, tables and split counts
    never recompile; the call allocates only its outputs and a workspace sized by the shapes,
    so it can be captured in a CUDA graph and replayed with new cache contents, lengths and
    tables. torch.compile traces it without a graph break, as the operator
    torch.ops.attnjit.attention_with_kvcache, or with k and v attention_with_kvcache_append
    (which mutates k_cache and v_cache), and a compiled call can be captured too.
    Ragged new tokens (speculative decoding): cu_seqlens_q (int32 [B + 1], 0 = cu[0] <= ... <=
    cu[B] = total_q) with max_seqlen_q (a Python int >= the most tokens of a sequence; required
    with it, never read from the device) packs them: q [total_q, H, D], k and v [total_q, Hkv,
    D] (each sequence appends its own tokens), o [total_q, H, Dv] and the LSE [H, total_q];
    sequence b's tokens are rows cu_seqlens_q[b]:cu_seqlens_q[b + 1], the last of its keys
    (causal among them). startend_row_indices: FlashMask's vectors over the cache, int32 [B, Hm,
    capacity, C] on q's device (Hm 1 or Hkv; capacity = k_cache.shape[1], or max_pages x
    page_size when paged), C 1 (LTS) or 2 (LTS, LTE) with causal=True, 2 (LTS, UTE) or 4
    (LTS, LTE, UTS, UTE) with causal=False, window_size (-1, -1). Their rows are positions in
    the sequence, the same numbers as the keys: a new token's row is the index of its own key
    (cache_seqlens[b] + t when appending), so the vectors a sequence was prefilled with serve
    every later step; key j is hidden from the rows in [LTS, LTE) and [UTS, UTE). The key blocks
    they hide from every new token are neither read nor computed. alibi_slopes (fp32 [H] on
    q's device) adds slope[h] * (j - position) to the scores, position being the new token's
    own key index. mask: an element predicate, attnjit.predicate("..."), alone (no causal,
    window_size or startend_row_indices): it sees b, h, and q and k as positions in the
    sequence (a new token's q is its own key's index, so "k <= q" is causal), its int32
    tensors [length] or [rows, length] with rows 1 or B, indexed by positions. Without tables
    to read, each CTA evaluates it on every pair of a key block a block ahead of the block's
    load, skips the blocks it hides from every new token and applies it per element where it
    hides some pairs: the evaluation visits every cached key (FlashMask vectors are faster for
    masks they can say).
    An FP8 cache (k_cache and v_cache of torch.float8_e4m3fn, head dims 64, 128 or 256 equal,
    sm_89 and later) streams half the bytes; q and o stay bf16 or fp16. k_descale and v_descale
    (fp32, [B, Hkv] per sequence and KV head or [1] per tensor; None: 1) turn the stored values
    into keys and values: K = k_cache * k_descale. k and v to append are e4m3 too, written as
    they are (quantized by the caller with the same descales).
    """
    for name, value in (("causal", causal), ("return_lse", return_lse)):
        if not isinstance(value, bool):
            raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    left, right = _check_window(window_size, "window_size")
    if startend_row_indices is not None:
        _varlen_flashmask(startend_row_indices, causal, window_size)
    if causal and (left, right) != (-1, -1):
        right = 0  # causal with a window: FlashAttention's window_size=(left, 0)
    if causal and left == -1:
        kind = "causal"
    elif (left, right) != (-1, -1):
        kind = "sliding_window"
    else:
        kind = "none"
    window = (left, right) if kind == "sliding_window" else (-1, 0)
    if startend_row_indices is not None:
        kind = (f"flashmask(causal={str(causal).lower()},"
                f"columns={startend_row_indices.shape[-1]})")
    names, scalars, tensors = _launch.NO_PREDICATE
    if mask is not None:
        _check_element_predicate(mask, causal, window_size, startend_row_indices)
        kind = mask.mask_text
        names, scalars = mask.names, mask.scalars
        tensors = [mask.tensors[name] for name in names]  # checked by the launch, as the rest
    if num_splits is None:
        num_splits = 0
    elif not isinstance(num_splits, int) or isinstance(num_splits, bool):
        raise TypeError(f"num_splits: expected an int or None, got {type(num_splits).__name__}")
    scale = _optional_positive("softmax_scale", softmax_scale, "1/sqrt(head_dim)")
    if cu_seqlens_q is None:
        if max_seqlen_q is not None:
            raise AttnjitError(f"max_seqlen_q: got {max_seqlen_q!r}; accepted: None without "
                               "cu_seqlens_q")
        max_seqlen_q = 0
    elif not isinstance(max_seqlen_q, int) or isinstance(max_seqlen_q, bool):
        raise TypeError("max_seqlen_q: expected an int with cu_seqlens_q (the most new tokens "
                        f"of a sequence), got {type(max_seqlen_q).__name__}")
    ragged = (cu_seqlens_q, _ffi.int_argument("max_seqlen_q", max_seqlen_q))
    arguments = (kind, startend_row_indices, alibi_slopes, list(tensors), list(scalars),
                 " ".join(names), scale, *window, _check_softcap(softcap), sinks,
                 _ffi.int_argument("num_splits", num_splits), return_lse)
    descales = (k_descale, v_descale)
    _check_kv_pair(k, v)  # it chooses the operator
    if not _through_operators(q):
        # The tensor checks run once per call signature, in the launch.
        o, lse = _launch.kvcache_forward(_torch, q, k_cache, v_cache, cache_seqlens, block_table,
                                         k, v, *ragged, *arguments, check=_check_kvcache_tensors,
                                         descales=descales)
        return (o, lse) if return_lse else o
    _check_kvcache_tensors(q, k_cache, v_cache, cache_seqlens, block_table, k, v, sinks,
                           *ragged, startend_row_indices, alibi_slopes, descales)
    if k is None:
        o, lse = _ops.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table,
                                             *ragged, *arguments, *descales)
    else:
        o, lse = _ops.attention_with_kvcache_append(q, k_cache, v_cache, cache_seqlens,
                                                    block_table, k, v, *ragged, *arguments,
                                                    *descales)
    return (o, lse) if return_lse else o


def attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor,
                     cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int, *,
                     dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                     causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                     softcap: Optional[float] = 0.0, alibi_slopes: Optional[Tensor] = None,
                     deterministic: bool = False, seqused_k: Optional[Tensor] = None,
                     return_lse: bool = False, sinks: Optional[Tensor] = None,
                     startend_row_indices: Optional[Tensor] = None,
                     mask: Optional[PredicateMask] = None, q_descale: Optional[Tensor] = None,
                     k_descale: Optional[Tensor] = None, v_descale: Optional[Tensor] = None
                     ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Differentiable attention on a packed batch, with the arguments of FlashAttention's
    flash_attn_varlen_func: B sequences of different lengths packed one after another.

    q [total_q, H, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv]: bf16 or fp16, on one CUDA
    device, last dimension contiguous; H a multiple of Hkv. cu_seqlens_q and cu_seqlens_k:
    int32 [B + 1] on q's device, 0 = cu[0] <= cu[1] <= ... <= cu[B] = total_q (resp.
    total_k); sequence s has the queries cu_seqlens_q[s]:cu_seqlens_q[s + 1] and the keys
    cu_seqlens_k[s]:cu_seqlens_k[s + 1] (Sq_s and Sk_s of them; may differ, may be 0).
    seqused_k (optional, int32 [B]): only the first seqused_k[s] keys of sequence s are used.
    max_seqlen_q and max_seqlen_k: Python ints >= the longest query (resp. key) sequence, at
    most total_q (total_k). The masks act per sequence, in its local positions: causal=True is
    bottom-right aligned (query i sees key j iff j <= i + Sk_s - Sq_s); window_size=(left,
    right) keeps the keys with i + Sk_s - Sq_s - left <= j <= i + Sk_s - Sq_s + right (-1:
    unbounded; causal=True with a window sets right to 0). startend_row_indices: FlashMask's
    vectors inside each sequence, int32 [1, Hm, total_k, C] on q's device (this one shape; Hm
    1 or Hkv), for each key C rows local to its sequence (0..Sq_s; larger values read as
    Sq_s); each sequence's mask is then attnjit.forward's flashmask(causal=causal, columns=C):
    C 1 (LTS) or 2 (LTS, LTE) with causal=True (bottom-right aligned as above), 2 (LTS, UTE) or
    4 (LTS, LTE, UTS, UTE) with causal=False; window_size stays (-1, -1) with it. mask: an
    element predicate, attnjit.predicate("..."), alone (no causal, window_size,
    startend_row_indices or sinks): in sequence s it sees b = s and q, k local to the
    sequence (0..Sq_s - 1, 0..Sk_s - 1; no bottom-right shift: write it in the predicate, e.g.
    "k <= q + off[b]"), and its int32 tensors are [length] or [rows, length] with rows 1
    (shared) or B (row s read in sequence s); pairs of different sequences and keys past
    seqused_k stay hidden. A mask of the mask language (families such as document(...), & or
    |) is refused: the host builds it for a padded batch's sizes, and a packed batch's lengths
    stay on the device. softmax_scale defaults to 1/sqrt(D); softcap > 0 gives
    s <- softcap * tanh(s / softcap) (0.0 or None: none). alibi_slopes (fp32 [H] on q's
    device) adds slope[h] * (j - i) in local positions; it takes shared boundaries: one tensor
    passed as both cu_seqlens_q and cu_seqlens_k, no seqused_k. dropout_p must be 0. sinks
    (fp32 [H] on q's device) adds a learnable sink logit per query head to every row's softmax
    denominator, as in attnjit.forward, and receives its gradient (summed over all sequences);
    the vectors, alibi_slopes and a predicate's tensors get none.

    Returns o [total_q, H, Dv], and also lse fp32 [H, total_q] when return_lse (not
    differentiable). A query row that sees no key (Sk_s = 0, seqused_k[s] = 0, a window past
    its keys, or vectors or a predicate that hide it from every key) gives o = 0 and
    lse = -inf (with sinks, the sink's logit), as in attnjit.attention, and a zero gradient.
    q, k and v receive d_q, d_k and d_v (with GQA a KV head's gradient sums over its query
    heads); deterministic=True makes them bitwise repeatable. The host never reads the
    boundaries (their values are checked on the device with ATTNJIT_DEBUG=1): calls are
    CUDA-graph and torch.compile safe, and new boundaries of the same shapes never recompile,
    so a captured graph can be replayed with new cu_seqlens contents as long as max_seqlen_q
    and max_seqlen_k still bound them.

    FP8 (sm_90a, forward only, as attnjit.forward): q, k and v torch.float8_e4m3fn (head dims
    64, 128 or 256, equal), o bf16; q_descale, k_descale and v_descale (fp32 [B, Hkv] per
    sequence and KV head, or [1] per tensor; None: 1; FlashAttention-3's) turn the bytes into
    the values they stand for. Every mask above but an element predicate; q, k and v must not
    require grad.

    >>> bf16 = dict(device="cuda", dtype=torch.bfloat16)                 # doctest: +GPU
    >>> q = torch.randn(300, 8, 128, **bf16, requires_grad=True)         # doctest: +GPU
    >>> k, v = torch.randn(2, 340, 2, 128, **bf16)                       # doctest: +GPU
    >>> cu_q = torch.tensor([0, 100, 300], dtype=torch.int32, device="cuda")  # doctest: +GPU
    >>> cu_k = torch.tensor([0, 140, 340], dtype=torch.int32, device="cuda")  # doctest: +GPU
    >>> o = attnjit.attention_varlen(q, k, v, cu_q, cu_k, 200, 200, causal=True)  # doctest: +GPU
    >>> o.shape                                                          # doctest: +GPU
    torch.Size([300, 8, 128])
    >>> o.sum().backward()                                               # doctest: +GPU
    >>> lim = torch.tensor([60, 200], dtype=torch.int32, device="cuda")  # doctest: +GPU
    >>> mask = attnjit.predicate("q >= k && k < lim[b]", tensors={"lim": lim})  # doctest: +GPU
    >>> o = attnjit.attention_varlen(q, k, v, cu_q, cu_k, 200, 200, mask=mask)  # doctest: +GPU
    """
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or dropout_p != 0:
        raise ValueError(f"dropout_p: got {dropout_p!r}; accepted: 0.0 (attnjit has no "
                         "attention dropout)")
    if alibi_slopes is not None and not _shared_boundaries(cu_seqlens_q, cu_seqlens_k,
                                                           seqused_k):
        raise ValueError("alibi_slopes: given with boundaries of the keys' own (another "
                         "cu_seqlens_k tensor, or seqused_k); accepted: None, or shared "
                         "boundaries (one tensor passed as both cu_seqlens_q and cu_seqlens_k, "
                         "seqused_k None)")
    for name, value in (("causal", causal), ("deterministic", deterministic),
                        ("return_lse", return_lse)):
        if not isinstance(value, bool):
            raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    mask_text, window_left, window_right = _varlen_mask(causal, window_size)
    predicate = _launch.NO_PREDICATE
    if mask is not None:
        _check_element_predicate(mask, causal, window_size, startend_row_indices)
        _refuse_predicate_sinks(sinks)
        mask_text = mask.mask_text
        predicate = (mask.names, mask.scalars, [mask.tensors[name] for name in mask.names])
    elif startend_row_indices is not None:
        mask_text = _varlen_flashmask(startend_row_indices, causal, window_size)
    scale = _optional_positive("softmax_scale", softmax_scale, "1/sqrt(head_dim)")
    cap = 0.0 if softcap is None or (type(softcap) in (int, float) and softcap == 0) \
        else _check_softcap(softcap)
    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        _check_max_seqlen(name, value)
    names, scalars, tensors = predicate
    arguments = (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, startend_row_indices,
                 alibi_slopes, tensors, max_seqlen_q, max_seqlen_k, mask_text, scalars,
                 " ".join(names), causal, scale, window_left, window_right, cap, deterministic,
                 sinks)
    _torch_of(q, "q")
    descales = (q_descale, k_descale, v_descale)
    if _is_fp8(q) or any(d is not None for d in descales):
        # The forward operator's arguments: no predicate, no deterministic flag.
        forward = (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, startend_row_indices,
                   alibi_slopes, max_seqlen_q, max_seqlen_k, mask_text, causal, scale,
                   window_left, window_right, cap, sinks)
        o, lse = _varlen_fp8(forward, descales, mask is not None)
        return (o, lse) if return_lse else o
    if _through_operators(q):
        _check_varlen_tensors(*arguments[:6], max_seqlen_q, max_seqlen_k, sinks,
                              startend_row_indices, alibi_slopes, predicate)
        o, lse = _ops.attention_varlen(*arguments)
    else:
        # The tensor checks run in the launch, once per call signature.
        o, lse = _functions()[2].apply(*arguments)
    return (o, lse) if return_lse else o


def _varlen_fp8(arguments, descales, has_predicate):
    """attention_varlen with e4m3 inputs (or descales): the forward alone, through the
    attnjit::forward_varlen operator (`arguments` are its arguments before the descales) or its
    launch; (o, lse)."""
    q, k, v = arguments[:3]
    if has_predicate:
        raise AttnjitError("mask: an element predicate with torch.float8_e4m3fn inputs or "
                           "descales; accepted: None (causal, window_size or "
                           "startend_row_indices say the mask of e4m3 inputs)")
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if getattr(tensor, "requires_grad", False):
            raise AttnjitError(f"{name}: requires grad with dtype {tensor.dtype}; accepted: "
                               "tensors that do not (e4m3 inputs are forward only)")
    indices, slopes, max_seqlen_q, max_seqlen_k = arguments[6:10]
    sinks = arguments[16]
    if _through_operators(q):
        _check_varlen_tensors(*arguments[:6], max_seqlen_q, max_seqlen_k, sinks, indices,
                              slopes, _launch.NO_PREDICATE, descales)
        return _ops.forward_varlen(*arguments, *descales)
    return _launch.varlen_forward(_torch, *arguments[:16], _check_varlen_tensors, sinks,
                                  _launch.NO_PREDICATE, descales)


def _varlen_mask(causal, window_size):
    """(mask, window_left, window_right) of attention_varlen's causal and window_size, as
    FlashAttention reads them: causal sets the window's right side to 0; no window is "none",
    (-1, 0) is "causal", any other window "sliding_window"."""
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2 or not all(
            isinstance(w, int) and not isinstance(w, bool) for w in window_size):
        raise TypeError(f"window_size: expected a pair of ints (left, right), got "
                        f"{window_size!r}")
    if min(window_size) < -1:
        raise ValueError(f"window_size: got {tuple(window_size)}; accepted: sizes >= 0, or -1 "
                         "for unbounded")
    left = _ffi.int_argument("window_size[0]", window_size[0])
    right = 0 if causal else _ffi.int_argument("window_size[1]", window_size[1])
    if left == -1 and right == -1:
        return "none", -1, 0
    if left == -1 and right == 0:
        return "causal", -1, 0
    return "sliding_window", left, right


def _varlen_flashmask(indices, causal, window_size):
    """attention_varlen's (and attention_with_kvcache's) mask with FlashMask vectors,
    "flashmask", after the checks of what goes with them: no window, and a column count the
    causal flag takes."""
    if tuple(window_size) != (-1, -1):
        raise ValueError(f"window_size: got {tuple(window_size)} with startend_row_indices; "
                         "accepted: (-1, -1) (the vectors say the mask; causal=True makes it "
                         "a causal FlashMask)")
    _torch_of(indices, "startend_row_indices")
    columns = indices.shape[-1] if indices.dim() == 4 else None
    accepted = (1, 2) if causal else (2, 4)
    if columns is not None and columns not in accepted:
        kind = "1 (LTS) or 2 (LTS, LTE)" if causal else "2 (LTS, UTE) or 4 (LTS, LTE, UTS, UTE)"
        raise ValueError(f"startend_row_indices: C={columns} (shape {tuple(indices.shape)}) "
                         f"with causal={causal}; accepted: C={kind}")
    return "flashmask"


def _check_element_predicate(mask, causal, window_size, indices):
    """attention_varlen's and attention_with_kvcache's checks of `mask`: an element predicate,
    alone."""
    if not isinstance(mask, PredicateMask) or mask.language:
        raise ValueError(f"mask: got {mask!r}; accepted: None, or an element predicate over b, "
                         "h, q, k (attnjit.predicate of one predicate: no families, & or |, "
                         "which the host builds for a padded batch's sizes, while a packed "
                         "batch's lengths stay on the device); causal, window_size and "
                         "startend_row_indices say the other masks")
    _check_predicate_alone(causal, indices, window_size, (-1, -1), "window_size")


def _shared_boundaries(cu_seqlens_q, cu_seqlens_k, seqused_k):
    """Whether the keys take the queries' boundaries (the spec's varlen=shared): one tensor
    for both (or views of the same memory), no seqused_k. Tensors seen while tracing (fake,
    functional) pass unless they are one object: their launch compiles varlen=true, which the
    library refuses with ALiBi by name."""
    if seqused_k is not None:
        return False
    if cu_seqlens_k is cu_seqlens_q:
        return True
    if _torch is None or not all(isinstance(t, _torch.Tensor)
                                 for t in (cu_seqlens_q, cu_seqlens_k)):
        return False
    if (_torch.compiler.is_compiling() or type(cu_seqlens_q) is not _torch.Tensor
            or type(cu_seqlens_k) is not _torch.Tensor):
        return True
    return _launch._varlen_layout(cu_seqlens_q, cu_seqlens_k, None) == "shared"


def _check_max_seqlen(name, value):
    """max_seqlen_q/k: a Python int from 0 to INT_MAX (a SymInt while torch.compile traces);
    never a tensor, whose value the host would have to wait for."""
    symbolic = _torch is not None and isinstance(value, _torch.SymInt)
    if not symbolic and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"{name}: expected a Python int, got {type(value).__name__} (a tensor "
                        "would make the host wait for its value)")
    if not symbolic:
        _ffi.int_argument(name, value, 0)


def _mask_object(mask, q, k):
    """`mask`, or for a mask of the mask language (attnjit.predicate with families, & or |)
    the FlashMask or element predicate it builds for q's and k's sizes on q's device."""
    if isinstance(mask, PredicateMask) and mask.language:
        _torch_of(q, "q")
        _torch_of(k, "k")
        return mask.build(q.shape[0], q.shape[1], k.shape[1], q.device)
    return mask


def _refuse_predicate_sinks(sinks):
    if sinks is not None:
        raise ValueError("sinks: given with a predicate mask; accepted: None (sinks are not yet "
                         "supported with attnjit.predicate masks; use a built-in mask or "
                         "attnjit.flashmask)")


def _check_predicate_alone(causal, indices, window, unbounded=(-1, 0), window_name="window"):
    """ValueError unless a predicate mask comes alone: causal False, no vectors, the window
    `unbounded` (the default of the argument `window_name`)."""
    if causal is not False or indices is not None or tuple(window) != unbounded:
        raise ValueError(f"mask: a predicate with causal/startend_row_indices/{window_name}; "
                         "accepted: a predicate alone (it says the whole mask)")


def _predicate_call(q, k, v, mask, slopes, scale, softcap, deterministic, graph):
    """(o, lse) of an element predicate mask: through the operators when traced, else launched
    directly, with the autograd formula when `graph` (attnjit.attention) and without it
    (attnjit.forward)."""
    _check_tensors(q, k, v, None, slopes)
    names = mask.names
    tensors = [mask.tensors[name] for name in names]
    _check_predicate_tensors(q, names, tensors, q.shape[0])
    arguments = (q, k, v, tensors, mask.scalars, mask.structure)
    trailing = (slopes, scale, softcap, deterministic)
    if _through_operators(q):
        if graph:
            return _ops.attention_predicate(*arguments, " ".join(names), *trailing)
        with _torch.no_grad():
            return _ops.attention_predicate(*arguments, " ".join(names), *trailing)
    if graph:
        return _functions()[1].apply(*arguments, names, *trailing)
    return _launch.predicate_forward(_torch, *arguments, names, slopes, scale, softcap)


def _through_operators(q):
    """Whether a call goes through the torch.ops.attnjit operators: when torch.compile traces
    it, and whenever q is not a plain tensor or a dispatch or function mode is active (fake
    tensors, make_fx, functionalization). Plain eager calls launch directly: the same launches
    without the dispatcher's round trip. Without the operators (PyTorch < 2.4) never."""
    if _ops is None:
        return False
    if _torch.compiler.is_compiling():
        return True
    return (not _EAGER_DIRECT or type(q) is not _torch.Tensor or _modes_active()
            or _is_wrapped(q))


# Tests and the host-overhead benchmark set this to False to run eager calls through the
# operators too.
_EAGER_DIRECT = True


def _modes_active():
    return _dispatch_stack_depth() > 0 or _function_mode_enabled()


_functions_defined = None


def _functions():
    """(Attention, PredicateAttention, VarlenAttention): the torch.autograd.Functions of eager
    calls, defined on first use so that importing attnjit needs no PyTorch."""
    global _functions_defined
    if _functions_defined is None:
        _functions_defined = _define_functions(_torch)
    return _functions_defined


def _define_functions(torch):
    once_differentiable = torch.autograd.function.once_differentiable

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, indices, slopes, mask, causal, scale, window_left,
                    window_right, softcap, deterministic, sinks):
            arguments = (mask, causal, scale, window_left, window_right, softcap)
            o, lse = _launch.forward(torch, q, k, v, indices, slopes, *arguments, True, "",
                                     _check_tensors, sinks)
            ctx.save_for_backward(q, k, v, o, lse, indices, slopes, sinks)
            ctx.arguments = arguments + (deterministic,)
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        @once_differentiable
        def backward(ctx, d_o, _d_lse):
            q, k, v, o, lse, indices, slopes, sinks = ctx.saved_tensors
            d_q, d_k, d_v, d_sinks = _launch.attention_backward(
                torch, d_o, q, k, v, o, lse, indices, slopes, *ctx.arguments, sinks)
            return (d_q, d_k, d_v) + (None,) * 9 + (d_sinks,)

    class PredicateAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, tensors, scalars, structure, names, slopes, scale, softcap,
                    deterministic):
            o, lse = _launch.predicate_forward(torch, q, k, v, tensors, scalars, structure,
                                               names, slopes, scale, softcap)
            ctx.save_for_backward(q, k, v, o, lse, slopes)
            ctx.arguments = (tensors, scalars, structure, names)
            ctx.trailing = (scale, softcap, deterministic)
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        @once_differentiable
        def backward(ctx, d_o, _d_lse):
            q, k, v, o, lse, slopes = ctx.saved_tensors
            d_q, d_k, d_v = _launch.predicate_backward(torch, d_o, q, k, v, o, lse,
                                                       *ctx.arguments, slopes, *ctx.trailing)
            return (d_q, d_k, d_v) + (None,) * 8

    class VarlenAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, indices, slopes,
                    predicate_tensors, max_seqlen_q, max_seqlen_k, mask, predicate_scalars,
                    predicate_names, causal, scale, window_left, window_right, softcap,
                    deterministic, sinks):
            tensors = (cu_seqlens_q, cu_seqlens_k, seqused_k, indices, slopes)
            arguments = (max_seqlen_q, max_seqlen_k, mask, causal, scale, window_left,
                         window_right, softcap)
            predicate = (predicate_names.split(), predicate_scalars, predicate_tensors)
            o, lse = _launch.varlen_forward(torch, q, k, v, *tensors, *arguments,
                                            _check_varlen_tensors, sinks, predicate)
            ctx.save_for_backward(q, k, v, o, lse, *tensors, sinks)
            ctx.arguments = arguments + (deterministic,)
            ctx.predicate = predicate
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        @once_differentiable
        def backward(ctx, d_o, _d_lse):
            q, k, v, o, lse, *tensors, sinks = ctx.saved_tensors
            d_q, d_k, d_v, d_sinks = _launch.varlen_backward(
                torch, d_o, q, k, v, o, lse, *tensors, *ctx.arguments, sinks, ctx.predicate)
            return (d_q, d_k, d_v) + (None,) * 17 + (d_sinks,)

    return Attention, PredicateAttention, VarlenAttention


def cache_stats() -> Dict[str, int]:
    """The library's kernel-cache counters since the process started: memory_hits, disk_hits,
    compiles (kernel sets built with NVRTC) and memory_entries.

    >>> sorted(attnjit.cache_stats())
    ['compiles', 'disk_hits', 'memory_entries', 'memory_hits']
    """
    return _launch.cache_counters()


def _is_kernel_layout(tensor):
    """Whether the kernels take `tensor` as it is: last dimension contiguous, the other strides
    whole 16-byte rows (multiples of 8 elements), a 16-byte aligned start."""
    return _launch._kernel_layout(tensor) is tensor


def _check_mask_arguments(mask, causal, indices):
    if not isinstance(mask, str) or mask not in MASKS:
        raise ValueError(f"mask: got {mask!r}; accepted: {', '.join(MASKS)}, or a mask object of "
                         "attnjit.flashmask() or attnjit.predicate()")
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


def _optional_positive(name, value, none_means):
    """`value` for the library as a float, 0.0 for None (which means `none_means`)."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float or None, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: got {value}; accepted: a finite number > 0, or None for "
                         f"{none_means}")
    return float(value)


def _check_scale(scale):
    """The softmax scale for the library: 0.0 (its 1/sqrt(D) default) for None."""
    return _optional_positive("scale", scale, "1/sqrt(head_dim)")


def _check_softcap(softcap):
    """The cap for the library: 0.0 (no soft-capping) for None."""
    return _optional_positive("softcap", softcap, "no soft-capping")


def _check_window(window, name="window"):
    """(left, right) of a window argument (`name` in the messages): two ints >= -1."""
    if type(window) is tuple and window == (-1, 0):  # the default, quickly
        return -1, 0
    is_int = [isinstance(w, int) and not isinstance(w, bool) for w in window] \
        if isinstance(window, (tuple, list)) else []
    if len(is_int) != 2 or not all(is_int):
        raise TypeError(f"{name}: expected a pair of ints (left, right), got {window!r}")
    if min(window) < -1:
        raise ValueError(f"{name}: got {tuple(window)}; accepted: sizes >= 0, or -1 for "
                         "unbounded")
    return (_ffi.int_argument(f"{name}[0]", window[0]),
            _ffi.int_argument(f"{name}[1]", window[1]))


def _torch_of(tensor, name):
    """The torch module of a tensor argument; TypeError naming the argument if it is none."""
    if _torch is None or not isinstance(tensor, _torch.Tensor):
        note = ""
        if _torch is None:
            note = " (PyTorch is not installed; attnjit needs it to run kernels)"
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}{note}")
    return _torch


def _dtype_name(tensor):
    return str(tensor.dtype).removeprefix("torch.")


def _descriptor(name, tensor):
    """The attnjit_tensor of a torch tensor (None stays None)."""
    if tensor is None:
        return None
    _torch_of(tensor, name)
    if tensor.device.type != "cuda":
        raise AttnjitError(f"{name}: on device {tensor.device}; accepted: a CUDA device")
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


def _check_on_device(name, tensor, q):
    """AttnjitError naming `tensor` when it is on the CPU or on another device than q."""
    if tensor.device.type != "cuda":
        raise AttnjitError(f"{name}: on device {tensor.device}; accepted: a CUDA device (that "
                           "of q)")
    if tensor.device != q.device:
        raise AttnjitError(f"{name}: on {tensor.device} but q is on {q.device}; accepted: "
                           "q's device")


def _is_fp8(tensor):
    """Whether `tensor` holds FP8 E4M3 values (torch.float8_e4m3fn)."""
    fp8 = getattr(_torch, "float8_e4m3fn", None)
    return fp8 is not None and getattr(tensor, "dtype", None) == fp8


def _check_activations(q, k, v, rank, layout, fp8=False):
    """torch, after the checks q, k and v share: tensors on q's device, one 16-bit dtype (or
    with `fp8` torch.float8_e4m3fn), rank `rank` (`layout` names its dims in the message), a
    contiguous last dimension."""
    torch = _torch_of(q, "q")
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        _torch_of(tensor, name)
        _check_on_device(name, tensor, q)
        if (tensor.dtype not in (torch.float16, torch.bfloat16)
                and not (fp8 and _is_fp8(tensor))):
            accepted = ("torch.bfloat16, torch.float16, torch.float8_e4m3fn" if fp8 else
                        "torch.bfloat16, torch.float16 (torch.float8_e4m3fn: attnjit.forward)")
            raise TypeError(f"{name}: dtype {tensor.dtype}; accepted: {accepted}")
        if tensor.dtype != q.dtype:
            raise TypeError(f"{name}: dtype {tensor.dtype} but q is {q.dtype}; accepted: one "
                            "dtype for q, k and v")
        if tensor.dim() != rank:
            raise AttnjitError(f"{name}: rank {tensor.dim()} (shape {tuple(tensor.shape)}); "
                               f"accepted: {rank}, {layout}")
        if tensor.stride(-1) != 1:
            raise AttnjitError(f"{name}: last dimension has stride {tensor.stride(-1)}; "
                               "accepted: 1 (contiguous head_dim)")
    return torch


def _check_forward_tensors(q, k, v, indices=None, slopes=None, sinks=None,
                           descales=(None, None, None)):
    """attnjit.forward's checks: _check_tensors' with e4m3 q, k and v accepted."""
    return _check_tensors(q, k, v, indices, slopes, sinks, descales, fp8=True)


def _check_tensors(q, k, v, indices=None, slopes=None, sinks=None, descales=(None, None, None),
                   *, fp8=False):
    """The checks of the tensor arguments that need no device: types, devices, dtypes, ranks,
    shapes and the layouts the kernels need (torch). attnjit.forward/attention and the
    operators' fake implementations run them, so a mismatch found while tracing reads like an
    eager one. With `fp8` (attnjit.forward) e4m3 q, k and v are accepted, and their descale
    factors: fp32 on q's device, [B, Hkv] or [1]; descales are refused with other inputs."""
    torch = _check_activations(q, k, v, 4, "[batch, seq, heads, head_dim]", fp8)
    if tuple(k.shape[:3]) != tuple(v.shape[:3]):
        raise AttnjitError(f"v: shape {tuple(v.shape)} differs from k {tuple(k.shape)} in "
                           "[batch, seq, heads]")
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise AttnjitError(f"k: shape {tuple(k.shape)} differs from q {tuple(q.shape)} in "
                           "batch or head_dim")
    if k.shape[2] == 0 or q.shape[2] % k.shape[2] != 0:
        raise AttnjitError(f"k: {k.shape[2]} heads; accepted: a divisor of q's {q.shape[2]} "
                           "heads (GQA/MQA)")
    if indices is not None:
        _check_startend(torch, indices, q, k.shape[0], k.shape[1], k.shape[2])
    if slopes is not None:
        _check_head_vector(torch, "alibi_slopes", slopes, q.shape[2], q, "one slope")
    if sinks is not None:
        _check_head_vector(torch, "sinks", sinks, q.shape[2], q, "one sink logit")
    _check_descales(torch, q, descales, q.shape[0], k.shape[2], "B", "batch row")
    return torch


def _check_descales(torch, q, descales, rows, kv_heads, rows_name, row_kind):
    """e4m3 inputs' (q_descale, k_descale, v_descale): None, or fp32 on q's device of shape [1]
    or [rows, kv_heads] (`rows_name` and `row_kind` name the rows in the message); refused
    with 16-bit q."""
    for name, descale in zip(("q_descale", "k_descale", "v_descale"), descales):
        if descale is None:
            continue
        _torch_of(descale, name)
        if not _is_fp8(q):
            raise AttnjitError(f"{name}: given with q of dtype {q.dtype}; accepted: None "
                               "(descale factors apply to torch.float8_e4m3fn inputs)")
        if descale.dtype != torch.float32:
            raise TypeError(f"{name}: dtype {descale.dtype}; accepted: torch.float32")
        _check_on_device(name, descale, q)
        if tuple(descale.shape) not in ((1,), (rows, kv_heads)) or not descale.is_contiguous():
            raise AttnjitError(f"{name}: shape {tuple(descale.shape)}"
                               f"{'' if descale.is_contiguous() else ' (not contiguous)'}; "
                               f"accepted: contiguous [1] (per tensor) or [{rows_name}={rows}, "
                               f"Hkv={kv_heads}] (per {row_kind} and KV head)")


def _check_kv_pair(k, v):
    """attention_with_kvcache's k and v: both (the new keys and values to append) or neither."""
    if (k is None) != (v is None):
        given, missing = ("k", "v") if v is None else ("v", "k")
        raise AttnjitError(f"{missing}: None while {given} is given; accepted: k and v together "
                           "(the new keys and values to append), or neither")


def _check_kvcache_tensors(q, k_cache, v_cache, cache_seqlens=None, block_table=None,
                           k=None, v=None, sinks=None, cu_seqlens_q=None, max_seqlen_q=0,
                           indices=None, slopes=None, descales=(None, None)):
    """attention_with_kvcache's checks that need no device and read no tensor's values: k and v
    together or neither (they choose the operator), every tensor argument a torch.Tensor, q of
    rank 4 (3 with cu_seqlens_q) and the caches of rank 4 (the output's shape reads them), an
    FP8 cache's two halves of one type and its descales (k_descale, v_descale) only with it. The
    library checks the rest (dtypes, devices, shapes, layouts, max_seqlen_q) when it prepares
    the launch. The calls, traced or not (eager ones once per call signature), and the
    operators' fake implementations run them."""
    _check_kv_pair(k, v)
    _torch_of(q, "q")
    for name, tensor in (("k_cache", k_cache), ("v_cache", v_cache)):
        _torch_of(tensor, name)
        if tensor.dim() != 4:
            raise AttnjitError(f"{name}.dim(): got {tensor.dim()}; accepted: 4")
    if cu_seqlens_q is not None:
        _torch_of(cu_seqlens_q, "cu_seqlens_q")
        if q.dim() != 3:
            raise AttnjitError(f"q.dim(): got {q.dim()}; accepted: 3 ([total_q, heads, "
                               "head_dim]: new tokens packed by cu_seqlens_q)")
    elif q.dim() != 4:
        raise AttnjitError(f"q.dim(): got {q.dim()}; accepted: 4 ([batch, seqlen_q, heads, "
                           "head_dim])")
    for name, tensor in (("cache_seqlens", cache_seqlens), ("block_table", block_table),
                         ("k", k), ("v", v), ("sinks", sinks), ("startend_row_indices", indices),
                         ("alibi_slopes", slopes), ("k_descale", descales[0]),
                         ("v_descale", descales[1])):
        if tensor is not None:
            _torch_of(tensor, name)
    _check_fp8_cache(k_cache, v_cache, descales)


def _check_fp8_cache(k_cache, v_cache, descales):
    """An FP8 KV cache: k_cache and v_cache both torch.float8_e4m3fn or neither; k_descale and
    v_descale only with one."""
    if _is_fp8(k_cache) != _is_fp8(v_cache):
        raise AttnjitError(f"v_cache: dtype {v_cache.dtype} with k_cache of {k_cache.dtype}; "
                           "accepted: the same dtype (an FP8 cache is float8_e4m3fn in both)")
    if not _is_fp8(k_cache):
        for name, descale in zip(("k_descale", "v_descale"), descales):
            if descale is not None:
                raise AttnjitError(f"{name}: given with a cache of dtype {k_cache.dtype}; "
                                   "accepted: None (descale factors apply to a "
                                   "torch.float8_e4m3fn cache)")


def _check_varlen_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k=None,
                          max_seqlen_q=0, max_seqlen_k=0, sinks=None, indices=None,
                          slopes=None, predicate=_launch.NO_PREDICATE,
                          descales=(None, None, None)):
    """attention_varlen's checks that need no device and read no tensor's values: types,
    devices, dtypes (16-bit or e4m3), ranks and shapes of the packed tensors, the boundaries,
    the FlashMask vectors (`indices`), alibi_slopes, sinks, a predicate's (names, scalars,
    tensors), whose rows are 1 or B (cu_seqlens_q's shape), e4m3 inputs' descales ([1] or
    [B, Hkv]), and max_seqlen_q/k against the totals. The launches and the operators' fake
    implementations run them."""
    torch = _check_activations(q, k, v, 3, "[total, heads, head_dim] (a packed batch)",
                               fp8=True)
    if tuple(k.shape[:2]) != tuple(v.shape[:2]):
        raise AttnjitError(f"v: shape {tuple(v.shape)} differs from k {tuple(k.shape)} in "
                           "[total_k, heads]")
    if k.shape[2] != q.shape[2]:
        raise AttnjitError(f"k: shape {tuple(k.shape)} differs from q {tuple(q.shape)} in "
                           "head_dim")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1] != 0:
        raise AttnjitError(f"k: {k.shape[1]} heads; accepted: a divisor of q's {q.shape[1]} "
                           "heads (GQA/MQA)")
    for name, tensor in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k),
                         ("seqused_k", seqused_k)):
        if tensor is None and name == "seqused_k":
            continue
        _torch_of(tensor, name)
        if tensor.dtype != torch.int32:
            raise TypeError(f"{name}: dtype {tensor.dtype}; accepted: torch.int32")
        _check_on_device(name, tensor, q)
        if tensor.dim() != 1 or not tensor.is_contiguous():
            raise AttnjitError(f"{name}: shape {tuple(tensor.shape)}, strides "
                               f"{tensor.stride()}; accepted: a contiguous 1-D tensor")
    sequences = cu_seqlens_q.shape[0] - 1
    if sequences < 1:
        raise AttnjitError(f"cu_seqlens_q: shape {tuple(cu_seqlens_q.shape)}; accepted: [B + 1] "
                           "for B >= 1 sequences")
    if cu_seqlens_k.shape[0] != sequences + 1:
        raise AttnjitError(f"cu_seqlens_k: shape {tuple(cu_seqlens_k.shape)}; accepted: "
                           f"[{sequences + 1}], as many entries as cu_seqlens_q")
    if seqused_k is not None and seqused_k.shape[0] != sequences:
        raise AttnjitError(f"seqused_k: shape {tuple(seqused_k.shape)}; accepted: "
                           f"[{sequences}], one per sequence")
    for name, value, total, tensor in (("max_seqlen_q", max_seqlen_q, q.shape[0], "q"),
                                       ("max_seqlen_k", max_seqlen_k, k.shape[0], "k")):
        if isinstance(value, int) and isinstance(total, int) and not 0 <= value <= total:
            raise AttnjitError(f"{name}: got {value}; accepted: 0 to {total} (the rows of "
                               f"{tensor}): the longest sequence or more")
    if indices is not None:
        _check_startend(torch, indices, q, 1, k.shape[0], k.shape[1], "total_k",
                        " (a packed batch's vectors: rows local to each sequence)")
    if slopes is not None:
        _check_head_vector(torch, "alibi_slopes", slopes, q.shape[1], q, "one slope")
    if sinks is not None:
        _check_head_vector(torch, "sinks", sinks, q.shape[1], q, "one sink logit")
    _check_predicate_tensors(q, predicate[0], predicate[2], sequences, packed=True)
    _check_descales(torch, q, descales, sequences, k.shape[1], "B", "sequence")


def _check_startend(torch, indices, q, batch, seqlen_k, kv_heads, keys="Sk", note=""):
    """FlashMask vectors: int32 [batch, Hm, seqlen_k, C] (Hm 1 or kv_heads, C 1, 2 or 4),
    contiguous, on q's device; `keys` names their third dimension and `note` adds to the
    accepted shape."""
    _torch_of(indices, "startend_row_indices")
    shape = tuple(indices.shape)
    if indices.dtype != torch.int32:
        raise TypeError(f"startend_row_indices: dtype {indices.dtype}; accepted: torch.int32")
    _check_on_device("startend_row_indices", indices, q)
    if (len(shape) != 4 or shape[0] != batch or shape[1] not in (1, kv_heads)
            or shape[2] != seqlen_k or shape[3] not in (1, 2, 4)):
        raise AttnjitError(f"startend_row_indices: shape {shape}; accepted: [B={batch}, "
                           f"Hm in (1, {kv_heads}), {keys}={seqlen_k}, C] with C in 1, 2, 4"
                           + note)
    if not indices.is_contiguous():
        raise AttnjitError("startend_row_indices: not contiguous; accepted: a contiguous "
                           "tensor (call .contiguous())")


def _check_head_vector(torch, name, tensor, heads, q, each):
    """An fp32 [heads] contiguous tensor on q's device (alibi_slopes, sinks): `each` says
    what one value is, e.g. "one slope"."""
    _torch_of(tensor, name)
    if tensor.dtype != torch.float32:
        raise TypeError(f"{name}: dtype {tensor.dtype}; accepted: torch.float32")
    _check_on_device(name, tensor, q)
    if tuple(tensor.shape) != (heads,):
        raise AttnjitError(f"{name}: shape {tuple(tensor.shape)}; accepted: [H={heads}], "
                           f"{each} per query head")
    if not tensor.is_contiguous():
        raise AttnjitError(f"{name}: not contiguous; accepted: a contiguous tensor (call "
                           ".contiguous())")


def _check_predicate_tensors(q, names, tensors, batch, packed=False):
    """A predicate's tensors: int32 on q's device, [length] or [rows, length] with rows 1 or
    `batch` (the batch, or a packed batch's sequences)."""
    torch = _torch_of(q, "q")
    each = (f"1 (shared by every sequence) or {batch} (one per sequence of the packed batch)"
            if packed else f"1 (shared by every batch) or {batch} (the batch)")
    for name, tensor in zip(names, tensors):
        label = f"tensors[{name!r}]"
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.int32:
            raise TypeError(f"{label}: expected an int32 torch.Tensor")
        _check_on_device(label, tensor, q)
        if tensor.dim() not in (1, 2) or (tensor.dim() == 2 and tensor.shape[0] not in (1, batch)):
            raise AttnjitError(f"{label}: shape {tuple(tensor.shape)}; accepted: [length], or "
                               f"[rows, length] with rows {each}")


def _spec_text(q, v, mask, causal, indices, return_lse, softcap, alibi_slopes):
    """The spec text attnjit.forward builds from its arguments (q and v give the dtype and
    head dims, indices the columns of a FlashMask)."""
    return _launch.spec_text(q.dtype, q.shape[3], v.shape[3], mask, causal,
                             0 if indices is None else indices.shape[3], return_lse,
                             softcap is not None, alibi_slopes is not None)


def _load_torch():
    """torch (and the torch.ops.attnjit operators, with PyTorch 2.4 or newer) when PyTorch is
    installed: imported here, not when first used, because torch.compile must find the
    operators defined before it traces a call."""
    if importlib.util.find_spec("torch") is None:
        return None, None
    import torch

    from . import _ops as ops
    return torch, ops.register(torch, _check_tensors, _check_forward_tensors,
                               _check_predicate_tensors, _check_varlen_tensors,
                               _check_kvcache_tensors)


_torch, _ops = _load_torch()
_C = getattr(_torch, "_C", None)
_dispatch_stack_depth = getattr(_C, "_len_torch_dispatch_stack", None)
_function_mode_enabled = getattr(_C, "_is_torch_function_mode_enabled", None)
_functorch = getattr(_C, "_functorch", None)
_is_wrapped = getattr(_functorch, "is_functorch_wrapped_tensor", None)
if None in (_dispatch_stack_depth, _function_mode_enabled, _is_wrapped):
    _EAGER_DIRECT = False  # this PyTorch cannot tell a plain eager call: always the operators
