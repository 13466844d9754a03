"""Predicate masks: an element predicate over (b, h, q, k) as the attention mask.

    mask = attnjit.predicate("q >= k && doc[q] == doc[k]", tensors={"doc": doc_ids})
    o = attnjit.attention(q, k, v, mask=mask)   # differentiable, like any other mask

The expression is nonzero where key k is visible to query q of (batch b, query head h)
(FlexAttention's mask_mod convention); README.md describes the language. Its literals become
runtime scalars, so predicates that differ only in literals, and new tensor contents, reuse
the compiled kernels. Tensors are int32 CUDA tensors [length] or [rows, length] (rows 1 or
the batch size: row b is read in batch b); an index outside [0, length) reads 0.
"""
import ctypes
import json

from . import _ffi


class PredicateMask:
    """A parsed predicate: its lifted structure (the spec's mask), the literals' values and the
    tensors bound to its names. Build one with attnjit.predicate()."""

    def __init__(self, expression, tensors):
        if not isinstance(expression, str):
            raise TypeError(f"expression: expected a str, got {type(expression).__name__}")
        if tensors is None:
            tensors = {}
        if not isinstance(tensors, dict):
            raise TypeError(f"tensors: expected a dict of name -> int32 tensor, got "
                            f"{type(tensors).__name__}")
        lifted = json.loads(_ffi.read_text(_ffi.lib.attnjit_predicate_lift,
                                           _ffi.text_argument("expression", expression)))
        self.expression = expression
        self.structure = lifted["structure"]
        self.scalars = list(lifted["scalars"])
        self.names = list(lifted["tensors"])
        missing = [name for name in self.names if name not in tensors]
        extra = [name for name in tensors if name not in self.names]
        if missing or extra:
            raise ValueError(f"tensors: got {sorted(tensors)}; accepted: exactly the tensors "
                             f"the predicate reads, {self.names}")
        self.tensors = {name: tensors[name] for name in self.names}

    def __repr__(self):
        return f"attnjit.predicate({self.expression!r}, tensors={sorted(self.tensors)})"

    def inputs(self, descriptor):
        """The attnjit_predicate_inputs of this predicate, and the objects it points into (keep
        them alive while the call runs). `descriptor(name, tensor)` makes an attnjit_tensor."""
        count = len(self.names)
        scalars = (ctypes.c_int32 * max(len(self.scalars), 1))(*self.scalars)
        names = (ctypes.c_char_p * max(count, 1))(
            *[_ffi.text_argument("tensors", name) for name in self.names])
        tensors = (_ffi.Tensor * max(count, 1))(
            *[descriptor(f"tensors[{name!r}]", self.tensors[name]) for name in self.names])
        inputs = _ffi.PredicateInputs(ctypes.cast(scalars, ctypes.POINTER(ctypes.c_int32)),
                                      len(self.scalars),
                                      ctypes.cast(names, ctypes.POINTER(ctypes.c_char_p)),
                                      ctypes.cast(tensors, ctypes.POINTER(_ffi.Tensor)), count)
        return inputs, (scalars, names, tensors)


def predicate(expression, tensors=None):
    """A predicate mask for attnjit.attention / attnjit.forward: `expression` over b, h, q, k
    (nonzero: visible), `tensors` a dict from the names it reads to int32 CUDA tensors."""
    return PredicateMask(expression, tensors)


_function = None


def attention(torch, q, k, v, mask, scale, return_lse, deterministic, softcap, alibi_slopes):
    """attnjit.attention with a PredicateMask (called from there, after its argument checks),
    with the score modifiers softcap (a cap or None) and alibi_slopes (fp32 [H] or None)."""
    from . import _spec_text
    global _function
    if _function is None:
        _function = _define_function(torch)
    for name, tensor in mask.tensors.items():
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.int32:
            raise TypeError(f"tensors[{name!r}]: expected an int32 torch.Tensor")
        if tensor.device != q.device:
            raise ValueError(f"tensors[{name!r}]: on {tensor.device} but q is on {q.device}; "
                             "accepted: q's device")
    mask_text = f"predicate({mask.structure})"
    modifiers = (softcap, alibi_slopes)
    forward_spec = _spec_text(q, v, mask_text, False, None, True, *modifiers)
    backward_spec = (f"{_spec_text(q, v, mask_text, False, None, False, *modifiers)} "
                     f"direction=backward deterministic={str(deterministic).lower()}")
    o, lse = _function.apply(q, k, v, mask, forward_spec, backward_spec, scale, softcap,
                             alibi_slopes)
    return (o, lse) if return_lse else o


def _define_function(torch):
    from . import _check_scale, _check_softcap, _descriptor, _is_kernel_layout, compile

    def launch(function, handle, tensors, mask, scale, softcap, alibi_slopes, stream_of):
        inputs, keep = mask.inputs(_descriptor)
        descriptors = [_descriptor(name, tensor) for name, tensor in tensors]
        pointers = [ctypes.byref(d) for d in descriptors]
        slopes = _descriptor("alibi_slopes", alibi_slopes)
        q = tensors[0][1]
        with torch.cuda.device(q.device):
            stream = torch.cuda.current_stream(q.device).cuda_stream
            _ffi.check(function(handle, *pointers[:stream_of], ctypes.byref(inputs),
                                *pointers[stream_of:], _check_scale(scale),
                                _check_softcap(softcap),
                                None if slopes is None else ctypes.byref(slopes), stream))
        del keep

    class PredicateAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, mask, forward_spec, backward_spec, scale, softcap,
                    alibi_slopes):
            batch, seqlen_q, heads = q.shape[0], q.shape[1], q.shape[2]
            o = torch.empty((batch, seqlen_q, heads, v.shape[3]), dtype=q.dtype,
                            device=q.device)
            lse = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
            launch(_ffi.lib.attnjit_forward_predicate, compile(forward_spec)._handle,
                   (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse)), mask, scale,
                   softcap, alibi_slopes, 5)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.mask = mask
            ctx.backward_spec = backward_spec
            ctx.scale = scale
            ctx.softcap = softcap
            ctx.alibi_slopes = alibi_slopes
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, d_o, _d_lse):
            q, k, v, o, lse = ctx.saved_tensors
            if not _is_kernel_layout(d_o):
                d_o = d_o.contiguous()
            d_q, d_k, d_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            launch(_ffi.lib.attnjit_backward_predicate, compile(ctx.backward_spec)._handle,
                   (("q", q), ("k", k), ("v", v), ("o", o), ("d_o", d_o), ("lse", lse),
                    ("d_q", d_q), ("d_k", d_k), ("d_v", d_v)), ctx.mask, ctx.scale,
                   ctx.softcap, ctx.alibi_slopes, 6)
            return d_q, d_k, d_v, None, None, None, None, None, None

    return PredicateAttention
