"""attnjit's torch.library custom operators (PyTorch 2.4 or newer).

    torch.ops.attnjit.forward                 attnjit.forward: (o, lse; lse empty [0] unless
                                              the call returns it)
    torch.ops.attnjit.attention               attnjit.attention's forward: (o, lse); its
    torch.ops.attnjit.attention_backward      autograd formula calls this one
    torch.ops.attnjit.attention_predicate     the same with a predicate mask: the predicate's
    torch.ops.attnjit.attention_predicate_backward   tensors, scalars, structure and names (a
                                              str, space-separated: the schema has no str[])
    torch.ops.attnjit.attention_varlen        attnjit.attention_varlen's forward on a packed
    torch.ops.attnjit.attention_varlen_backward   batch: (o [total_q, H, Dv], lse [H, total_q]);
                                              max_seqlen_q/k are ints of the call, never read
                                              from a tensor; a predicate mask is its
                                              "predicate(structure)" mask with its tensors,
                                              scalars and names (empty for other masks)
    torch.ops.attnjit.attention_with_kvcache  attnjit.attention_with_kvcache without k and v:
                                              (o, lse; lse empty [0] unless the call returns
                                              it); mask is none, causal or sliding_window;
                                              cu_seqlens_q (or None) and max_seqlen_q (0
                                              without) after block_table
    torch.ops.attnjit.attention_with_kvcache_append   the same with k_new and v_new between
                                              block_table and cu_seqlens_q, which it writes
                                              into k_cache and
                                              v_cache (its only mutated arguments: a decode
                                              step without an append mutates nothing, so
                                              functionalization never copies a cache for it)

forward, attention and attention_varlen take the sinks (fp32 [H] or None) last; their backward
operators return d_sinks after d_v (an empty [0] tensor without sinks). attention_varlen takes
startend_row_indices and alibi_slopes after the boundaries, as attention takes them after v.

Each has a fake implementation giving every output's shape, dtype and strides (after the same
argument checks as the eager call, so a shape mismatch seen while tracing is the same
AttnjitError), and the real one reads torch's current stream of the tensors' device when it
runs. torch.compile therefore traces attnjit.attention into its graph without a break, and the
graph can be captured into a CUDA graph. attnjit.forward, attnjit.attention,
attnjit.attention_varlen and attnjit.attention_with_kvcache call these operators whenever
something traces them (torch.compile, make_fx, fake tensors, a dispatch mode); plain eager calls
take the same launches directly, without the dispatcher's round trip.
"""

from typing import List, Optional, Tuple

from . import _launch


def _layout(tensor):
    return None if tensor is None else _launch._kernel_layout(tensor)


def _no_grad(argument, tensor_type):
    """The gradient entry of a non-differentiable input, in the input's pytree structure."""
    if isinstance(argument, (list, tuple)) and (
            not argument or any(isinstance(x, tensor_type) for x in argument)):
        return [None] * len(argument)
    return None


def _sinks_gradient(q, d_sinks, f32):
    """A backward operator's d_sinks output: the gradient, or an empty [0] without sinks (an
    operator returns tensors only)."""
    return q.new_empty((0,), dtype=f32) if d_sinks is None else d_sinks


def _fake_sinks_gradient(torch, q, sinks, f32):
    return q.new_empty((0,), dtype=f32) if sinks is None else torch.empty_like(sinks)


def _predicate(names, scalars, tensors):
    """The (names, scalar values, tensors) of a predicate as _launch takes them, from an
    operator's arguments (names space-separated)."""
    return names.split(), list(scalars), list(tensors)


def register(torch, check_tensors, check_forward_tensors, check_predicate_tensors,
             check_varlen_tensors, check_kvcache_tensors):
    """Defines the operators and returns torch.ops.attnjit, or None when this PyTorch has no
    torch.library.custom_op. `check_tensors(q, k, v, indices, slopes)`,
    `check_forward_tensors(q, k, v, indices, slopes, sinks, descales)` (attnjit.forward's, which
    takes e4m3 inputs and their descales),
    `check_predicate_tensors(q, names, tensors, batch)`, `check_varlen_tensors(q, k, v,
    cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, sinks, indices, slopes,
    predicate, descales)` and `check_kvcache_tensors(q, k_cache, v_cache, cache_seqlens,
    block_table, k, v, sinks)` are attnjit's argument checks (check_tensors takes the sinks after the slopes),
    which the fake implementations run."""
    library = torch.library
    if not (hasattr(library, "custom_op") and hasattr(library, "register_fake")):
        return None
    if hasattr(torch.ops.attnjit, "attention"):
        # Another copy of this package (e.g. a source tree beside an installed one) defined them.
        return torch.ops.attnjit
    Tensor = torch.Tensor
    f32 = torch.float32

    @library.custom_op("attnjit::forward", mutates_args=())
    def forward(q: Tensor, k: Tensor, v: Tensor, startend_row_indices: Optional[Tensor],
                alibi_slopes: Optional[Tensor], mask: str, causal: bool, scale: float,
                window_left: int, window_right: int, softcap: float, return_lse: bool,
                spec: str, sinks: Optional[Tensor], q_descale: Optional[Tensor] = None,
                k_descale: Optional[Tensor] = None,
                v_descale: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        o, lse = _launch.forward(torch, _layout(q), _layout(k), _layout(v), startend_row_indices,
                                 alibi_slopes, mask, causal, scale, window_left, window_right,
                                 softcap, return_lse, spec, check_forward_tensors, sinks,
                                 (q_descale, k_descale, v_descale))
        return o, q.new_empty((0,), dtype=f32) if lse is None else lse

    @forward.register_fake
    def _(q, k, v, startend_row_indices, alibi_slopes, mask, causal, scale, window_left,
          window_right, softcap, return_lse, spec, sinks, q_descale=None, k_descale=None,
          v_descale=None):
        check_forward_tensors(q, k, v, startend_row_indices, alibi_slopes, sinks,
                              (q_descale, k_descale, v_descale))
        batch, seqlen_q, heads = q.shape[0], q.shape[1], q.shape[2]
        o = q.new_empty((batch, seqlen_q, heads, v.shape[3]),
                        dtype=_launch.output_dtype(torch, q))
        lse = q.new_empty((batch, heads, seqlen_q) if return_lse else (0,), dtype=f32)
        return o, lse

    @library.custom_op("attnjit::attention", mutates_args=())
    def attention(q: Tensor, k: Tensor, v: Tensor, startend_row_indices: Optional[Tensor],
                  alibi_slopes: Optional[Tensor], mask: str, causal: bool, scale: float,
                  window_left: int, window_right: int, softcap: float,
                  deterministic: bool, sinks: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        return _launch.forward(torch, _layout(q), _layout(k), _layout(v), startend_row_indices,
                               alibi_slopes, mask, causal, scale, window_left, window_right,
                               softcap, True, "", check_tensors, sinks)

    @attention.register_fake
    def _(q, k, v, startend_row_indices, alibi_slopes, mask, causal, scale, window_left,
          window_right, softcap, deterministic, sinks):
        check_tensors(q, k, v, startend_row_indices, alibi_slopes, sinks)
        batch, seqlen_q, heads = q.shape[0], q.shape[1], q.shape[2]
        return (q.new_empty((batch, seqlen_q, heads, v.shape[3])),
                q.new_empty((batch, heads, seqlen_q), dtype=f32))

    @library.custom_op("attnjit::attention_backward", mutates_args=())
    def attention_backward(d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor,
                           startend_row_indices: Optional[Tensor],
                           alibi_slopes: Optional[Tensor], mask: str, causal: bool, scale: float,
                           window_left: int, window_right: int, softcap: float,
                           deterministic: bool,
                           sinks: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        d_q, d_k, d_v, d_sinks = _launch.attention_backward(
            torch, d_o, _layout(q), _layout(k), _layout(v), _layout(o), lse, startend_row_indices,
            alibi_slopes, mask, causal, scale, window_left, window_right, softcap, deterministic,
            sinks)
        return d_q, d_k, d_v, _sinks_gradient(q, d_sinks, f32)

    @attention_backward.register_fake
    def _(d_o, q, k, v, o, lse, startend_row_indices, alibi_slopes, mask, causal, scale,
          window_left, window_right, softcap, deterministic, sinks):
        return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
                _fake_sinks_gradient(torch, q, sinks, f32))

    def setup_attention(ctx, inputs, output):
        q, k, v, indices, slopes = inputs[:5]
        o, lse = output
        ctx.save_for_backward(q, k, v, o, lse, indices, slopes, inputs[-1])
        # mask, causal, scale, window_left/right, softcap, deterministic
        ctx.arguments = inputs[5:-1]
        ctx.mark_non_differentiable(lse)

    def attention_grad(ctx, d_o, _d_lse):
        q, k, v, o, lse, indices, slopes, sinks = ctx.saved_tensors
        d_q, d_k, d_v, d_sinks = torch.ops.attnjit.attention_backward(
            d_o, q, k, v, o, lse, indices, slopes, *ctx.arguments, sinks)
        return (d_q, d_k, d_v) + (None,) * 9 + (None if sinks is None else d_sinks,)

    attention.register_autograd(attention_grad, setup_context=setup_attention)

    @library.custom_op("attnjit::attention_predicate", mutates_args=())
    def attention_predicate(q: Tensor, k: Tensor, v: Tensor, tensors: List[Tensor],
                            scalars: List[int], structure: str, names: str,
                            alibi_slopes: Optional[Tensor], scale: float, softcap: float,
                            deterministic: bool) -> Tuple[Tensor, Tensor]:
        return _launch.predicate_forward(torch, _layout(q), _layout(k), _layout(v), list(tensors),
                                         list(scalars), structure, names.split(), alibi_slopes,
                                         scale, softcap)

    @attention_predicate.register_fake
    def _(q, k, v, tensors, scalars, structure, names, alibi_slopes, scale, softcap,
          deterministic):
        check_tensors(q, k, v, None, alibi_slopes)
        check_predicate_tensors(q, names.split(), tensors, q.shape[0])
        batch, seqlen_q, heads = q.shape[0], q.shape[1], q.shape[2]
        return (q.new_empty((batch, seqlen_q, heads, v.shape[3])),
                q.new_empty((batch, heads, seqlen_q), dtype=f32))

    @library.custom_op("attnjit::attention_predicate_backward", mutates_args=())
    def attention_predicate_backward(d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor,
                                     lse: Tensor, tensors: List[Tensor], scalars: List[int],
                                     structure: str, names: str,
                                     alibi_slopes: Optional[Tensor], scale: float,
                                     softcap: float,
                                     deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
        return _launch.predicate_backward(torch, d_o, _layout(q), _layout(k), _layout(v),
                                          _layout(o), lse, list(tensors), list(scalars),
                                          structure, names.split(), alibi_slopes, scale, softcap,
                                          deterministic)

    @attention_predicate_backward.register_fake
    def _(d_o, q, k, v, o, lse, tensors, scalars, structure, names, alibi_slopes, scale,
          softcap, deterministic):
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def setup_predicate(ctx, inputs, output):
        q, k, v, tensors = inputs[:4]
        o, lse = output
        ctx.save_for_backward(q, k, v, o, lse, inputs[7], *tensors)
        ctx.arguments = inputs[4:7]  # scalars, structure, names
        ctx.trailing = inputs[8:]    # scale, softcap, deterministic
        # The gradients mirror the inputs' structure as register_autograd flattens it (seen on
        # torch 2.11): a list of tensors and an empty list stay lists (of Nones), a non-empty
        # list of ints is one leaf (None).
        ctx.no_grads = tuple(_no_grad(x, Tensor) for x in inputs[3:])
        ctx.mark_non_differentiable(lse)

    def predicate_grad(ctx, d_o, _d_lse):
        q, k, v, o, lse, slopes, *tensors = ctx.saved_tensors
        d_q, d_k, d_v = torch.ops.attnjit.attention_predicate_backward(
            d_o, q, k, v, o, lse, tensors, *ctx.arguments, slopes, *ctx.trailing)
        return (d_q, d_k, d_v) + ctx.no_grads

    attention_predicate.register_autograd(predicate_grad, setup_context=setup_predicate)

    @library.custom_op("attnjit::attention_varlen", mutates_args=())
    def attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor,
                         cu_seqlens_k: Tensor, seqused_k: Optional[Tensor],
                         startend_row_indices: Optional[Tensor], alibi_slopes: Optional[Tensor],
                         predicate_tensors: List[Tensor], max_seqlen_q: int, max_seqlen_k: int,
                         mask: str, predicate_scalars: List[int], predicate_names: str,
                         causal: bool, scale: float, window_left: int, window_right: int,
                         softcap: float, deterministic: bool,
                         sinks: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        return _launch.varlen_forward(torch, _layout(q), _layout(k), _layout(v), cu_seqlens_q,
                                      cu_seqlens_k, seqused_k, startend_row_indices,
                                      alibi_slopes, max_seqlen_q, max_seqlen_k, mask, causal,
                                      scale, window_left, window_right, softcap,
                                      check_varlen_tensors, sinks,
                                      _predicate(predicate_names, predicate_scalars,
                                                 predicate_tensors))

    @attention_varlen.register_fake
    def _(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, startend_row_indices, alibi_slopes,
          predicate_tensors, max_seqlen_q, max_seqlen_k, mask, predicate_scalars,
          predicate_names, causal, scale, window_left, window_right, softcap, deterministic,
          sinks):
        check_varlen_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                             max_seqlen_k, sinks, startend_row_indices, alibi_slopes,
                             _predicate(predicate_names, predicate_scalars, predicate_tensors))
        total_q, heads = q.shape[0], q.shape[1]
        return (q.new_empty((total_q, heads, v.shape[2])),
                q.new_empty((heads, total_q), dtype=f32))

    @library.custom_op("attnjit::forward_varlen", mutates_args=())
    def forward_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor,
                       cu_seqlens_k: Tensor, seqused_k: Optional[Tensor],
                       startend_row_indices: Optional[Tensor], alibi_slopes: Optional[Tensor],
                       max_seqlen_q: int, max_seqlen_k: int, mask: str, causal: bool,
                       scale: float, window_left: int, window_right: int, softcap: float,
                       sinks: Optional[Tensor], q_descale: Optional[Tensor],
                       k_descale: Optional[Tensor],
                       v_descale: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        # attention_varlen's forward alone (e4m3 inputs and their descales).
        return _launch.varlen_forward(torch, _layout(q), _layout(k), _layout(v), cu_seqlens_q,
                                      cu_seqlens_k, seqused_k, startend_row_indices,
                                      alibi_slopes, max_seqlen_q, max_seqlen_k, mask, causal,
                                      scale, window_left, window_right, softcap,
                                      check_varlen_tensors, sinks, _launch.NO_PREDICATE,
                                      (q_descale, k_descale, v_descale))

    @forward_varlen.register_fake
    def _(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, startend_row_indices, alibi_slopes,
          max_seqlen_q, max_seqlen_k, mask, causal, scale, window_left, window_right, softcap,
          sinks, q_descale, k_descale, v_descale):
        check_varlen_tensors(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                             max_seqlen_k, sinks, startend_row_indices, alibi_slopes,
                             _launch.NO_PREDICATE, (q_descale, k_descale, v_descale))
        total_q, heads = q.shape[0], q.shape[1]
        return (q.new_empty((total_q, heads, v.shape[2]), dtype=_launch.output_dtype(torch, q)),
                q.new_empty((heads, total_q), dtype=f32))

    @library.custom_op("attnjit::attention_varlen_backward", mutates_args=())
    def attention_varlen_backward(d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor,
                                  lse: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                                  seqused_k: Optional[Tensor],
                                  startend_row_indices: Optional[Tensor],
                                  alibi_slopes: Optional[Tensor], predicate_tensors: List[Tensor],
                                  max_seqlen_q: int, max_seqlen_k: int, mask: str,
                                  predicate_scalars: List[int], predicate_names: str,
                                  causal: bool, scale: float, window_left: int,
                                  window_right: int, softcap: float, deterministic: bool,
                                  sinks: Optional[Tensor]
                                  ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        d_q, d_k, d_v, d_sinks = _launch.varlen_backward(
            torch, d_o, _layout(q), _layout(k), _layout(v), _layout(o), lse, cu_seqlens_q,
            cu_seqlens_k, seqused_k, startend_row_indices, alibi_slopes, max_seqlen_q,
            max_seqlen_k, mask, causal, scale, window_left, window_right, softcap, deterministic,
            sinks, _predicate(predicate_names, predicate_scalars, predicate_tensors))
        return d_q, d_k, d_v, _sinks_gradient(q, d_sinks, f32)

    @attention_varlen_backward.register_fake
    def _(d_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, startend_row_indices,
          alibi_slopes, predicate_tensors, max_seqlen_q, max_seqlen_k, mask, predicate_scalars,
          predicate_names, causal, scale, window_left, window_right, softcap, deterministic,
          sinks):
        return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
                _fake_sinks_gradient(torch, q, sinks, f32))

    def setup_varlen(ctx, inputs, output):
        o, lse = output
        predicate_tensors = inputs[8]
        # q, k, v, cu_seqlens_q/k, seqused_k, startend_row_indices, alibi_slopes; sinks; the
        # predicate's tensors
        ctx.save_for_backward(*inputs[:8], o, lse, inputs[-1], *predicate_tensors)
        # max_seqlen_q/k, mask, predicate_scalars/names, causal, scale, window_left/right,
        # softcap, deterministic
        ctx.arguments = inputs[9:-1]
        ctx.no_grads = tuple(_no_grad(x, Tensor) for x in inputs[3:-1])
        ctx.mark_non_differentiable(lse)

    def varlen_grad(ctx, d_o, _d_lse):
        q, k, v, *tensors, o, lse, sinks = ctx.saved_tensors[:11]
        d_q, d_k, d_v, d_sinks = torch.ops.attnjit.attention_varlen_backward(
            d_o, q, k, v, o, lse, *tensors, list(ctx.saved_tensors[11:]), *ctx.arguments, sinks)
        return (d_q, d_k, d_v) + ctx.no_grads + (None if sinks is None else d_sinks,)

    attention_varlen.register_autograd(varlen_grad, setup_context=setup_varlen)
    _register_kvcache(torch, check_kvcache_tensors)
    return torch.ops.attnjit


def _register_kvcache(torch, check_kvcache_tensors):
    """Defines attnjit::attention_with_kvcache and attnjit::attention_with_kvcache_append."""
    library = torch.library
    Tensor = torch.Tensor
    f32 = torch.float32

    def launch(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, cu_seqlens_q,
               max_seqlen_q, mask, indices, slopes, predicate_tensors, predicate_scalars,
               predicate_names, scale, window_left, window_right, softcap, sinks, num_splits,
               return_lse, k_descale, v_descale):
        o, lse = _launch.kvcache_forward(torch, q, k_cache, v_cache, cache_seqlens, block_table,
                                         k_new, v_new, cu_seqlens_q, max_seqlen_q, mask, indices,
                                         slopes, predicate_tensors, predicate_scalars,
                                         predicate_names, scale, window_left, window_right,
                                         softcap, sinks, num_splits, return_lse,
                                         descales=(k_descale, v_descale))
        return o, q.new_empty((0,), dtype=f32) if lse is None else lse

    def fake(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, cu_seqlens_q,
             max_seqlen_q, indices, slopes, sinks, return_lse, k_descale, v_descale):
        check_kvcache_tensors(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new,
                              sinks, cu_seqlens_q, max_seqlen_q, indices, slopes,
                              (k_descale, v_descale))
        o_shape, lse_shape = _launch.kvcache_output_shapes(q, v_cache, cu_seqlens_q, return_lse)
        return q.new_empty(o_shape), q.new_empty(lse_shape or (0,), dtype=f32)

    @library.custom_op("attnjit::attention_with_kvcache", mutates_args=())
    def attention_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor,
                               cache_seqlens: Optional[Tensor], block_table: Optional[Tensor],
                               cu_seqlens_q: Optional[Tensor], max_seqlen_q: int, mask: str,
                               startend_row_indices: Optional[Tensor],
                               alibi_slopes: Optional[Tensor], predicate_tensors: List[Tensor],
                               predicate_scalars: List[int], predicate_names: str, scale: float,
                               window_left: int, window_right: int, softcap: float,
                               sinks: Optional[Tensor], num_splits: int,
                               return_lse: bool, k_descale: Optional[Tensor] = None,
                               v_descale: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        return launch(q, k_cache, v_cache, cache_seqlens, block_table, None, None, cu_seqlens_q,
                      max_seqlen_q, mask, startend_row_indices, alibi_slopes, predicate_tensors,
                      predicate_scalars, predicate_names, scale, window_left, window_right,
                      softcap, sinks, num_splits, return_lse, k_descale, v_descale)

    @attention_with_kvcache.register_fake
    def _(q, k_cache, v_cache, cache_seqlens, block_table, cu_seqlens_q, max_seqlen_q, mask,
          startend_row_indices, alibi_slopes, predicate_tensors, predicate_scalars,
          predicate_names, scale, window_left, window_right, softcap, sinks, num_splits,
          return_lse, k_descale=None, v_descale=None):
        return fake(q, k_cache, v_cache, cache_seqlens, block_table, None, None, cu_seqlens_q,
                    max_seqlen_q, startend_row_indices, alibi_slopes, sinks, return_lse,
                    k_descale, v_descale)

    @library.custom_op("attnjit::attention_with_kvcache_append",
                       mutates_args=("k_cache", "v_cache"))
    def attention_with_kvcache_append(q: Tensor, k_cache: Tensor, v_cache: Tensor,
                                      cache_seqlens: Optional[Tensor],
                                      block_table: Optional[Tensor], k_new: Tensor,
                                      v_new: Tensor, cu_seqlens_q: Optional[Tensor],
                                      max_seqlen_q: int, mask: str,
                                      startend_row_indices: Optional[Tensor],
                                      alibi_slopes: Optional[Tensor],
                                      predicate_tensors: List[Tensor],
                                      predicate_scalars: List[int], predicate_names: str,
                                      scale: float,
                                      window_left: int, window_right: int, softcap: float,
                                      sinks: Optional[Tensor], num_splits: int,
                                      return_lse: bool, k_descale: Optional[Tensor] = None,
                                      v_descale: Optional[Tensor] = None
                                      ) -> Tuple[Tensor, Tensor]:
        return launch(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, cu_seqlens_q,
                      max_seqlen_q, mask, startend_row_indices, alibi_slopes, predicate_tensors,
                      predicate_scalars, predicate_names, scale, window_left, window_right,
                      softcap, sinks, num_splits, return_lse, k_descale, v_descale)

    @attention_with_kvcache_append.register_fake
    def _(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, cu_seqlens_q,
          max_seqlen_q, mask, startend_row_indices, alibi_slopes, predicate_tensors,
          predicate_scalars, predicate_names, scale, window_left, window_right, softcap, sinks,
          num_splits, return_lse, k_descale=None, v_descale=None):
        return fake(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, cu_seqlens_q,
                    max_seqlen_q, startend_row_indices, alibi_slopes, sinks, return_lse,
                    k_descale, v_descale)
