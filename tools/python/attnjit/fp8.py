"""Preparing FP8 inputs for attnjit.forward: e4m3 tensors and their descale factors from 16-
or 32-bit q, k and v, with an optional Hadamard rotation of q and k (FlashAttention-3's
incoherent processing).

A few large entries (outliers) set a whole tensor's or head's scale and leave the other values
few of e4m3's 3 mantissa bits. Rotating q and k by the same orthonormal Hadamard matrix along
the head dimension spreads each outlier over every coordinate and leaves the scores
q k^T = (q H)(k H)^T unchanged; v is not rotated (o would then need the inverse rotation).

>>> import torch                                                          # doctest: +GPU
>>> q = torch.randn(2, 1024, 8, 128, device="cuda", dtype=torch.bfloat16)  # doctest: +GPU
>>> k = torch.randn(2, 1024, 2, 128, device="cuda", dtype=torch.bfloat16)  # doctest: +GPU
>>> v = torch.randn(2, 1024, 2, 128, device="cuda", dtype=torch.bfloat16)  # doctest: +GPU
>>> q8, k8, v8, descales = attnjit.fp8.quantize(q, k, v)                   # doctest: +GPU
>>> o = attnjit.forward(q8, k8, v8, mask="causal", **descales)             # doctest: +GPU
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Dict, Tuple

from ._ffi import AttnjitError

if TYPE_CHECKING:
    from torch import Tensor

E4M3_MAX = 448.0  # e4m3's largest finite value

_matrices = {}  # (head_dim, device) -> the orthonormal Hadamard matrix, fp32


def hadamard_matrix(head_dim: int, device=None) -> "Tensor":
    """The orthonormal Hadamard matrix of order head_dim (a power of two), fp32: Sylvester's
    construction scaled by 1/sqrt(head_dim), symmetric and its own inverse.

    >>> attnjit.fp8.hadamard_matrix(2)                                        # doctest: +GPU
    tensor([[ 0.7071,  0.7071],
            [ 0.7071, -0.7071]])
    """
    import torch

    if not isinstance(head_dim, int) or head_dim < 1 or head_dim & (head_dim - 1):
        raise AttnjitError(f"head_dim: got {head_dim!r}; accepted: a power of two")
    key = (head_dim, str(device))
    matrix = _matrices.get(key)
    if matrix is None:
        matrix = torch.ones(1, 1, dtype=torch.float32)
        while matrix.shape[0] < head_dim:
            matrix = torch.cat([torch.cat([matrix, matrix], 1), torch.cat([matrix, -matrix], 1)])
        matrix = (matrix / math.sqrt(head_dim)).to(device)
        _matrices[key] = matrix
    return matrix


def rotate(x: "Tensor") -> "Tensor":
    """x times the orthonormal Hadamard matrix along its last dimension (a power of two), in
    fp32: the rotation quantize(rotate_qk=True) applies to q and k."""
    return x.float() @ hadamard_matrix(x.shape[-1], x.device)


def _scaled(x, kv_heads, per_head, cu_seqlens=None):
    """(e4m3 x / descale, descale): descale fp32 [1], or [B, Hkv] with the query heads of a KV
    head sharing its factor, mapping the largest magnitude to E4M3_MAX (1 where all are 0).
    With cu_seqlens x is a packed batch [total, Hx, D] and B its sequences: each row takes its
    sequence's factors (found on the device: the host reads no boundary)."""
    import torch

    heads, dim = x.shape[-2], x.shape[-1]
    group = heads // kv_heads
    magnitude = x.detach().abs().float()
    if per_head and cu_seqlens is not None:
        total = x.shape[0]
        # The sequence of each row: how many sequences end at or before it.
        sequence = torch.searchsorted(cu_seqlens[1:].to(torch.int64),
                                      torch.arange(total, device=x.device), right=True)
        rows = magnitude.reshape(total, kv_heads, group * dim).amax(dim=2)
        descale = torch.zeros(cu_seqlens.shape[0] - 1, kv_heads, device=x.device)
        descale = descale.scatter_reduce(0, sequence[:, None].expand(total, kv_heads), rows,
                                         reduce="amax") / E4M3_MAX
    elif per_head:
        batch, seqlen = x.shape[0], x.shape[1]
        groups = magnitude.reshape(batch, seqlen, kv_heads, group, dim)
        descale = (groups.amax(dim=(1, 3, 4)) if x.numel() else
                   torch.zeros(batch, kv_heads, device=x.device)) / E4M3_MAX
    else:
        descale = (magnitude.amax() if x.numel() else torch.zeros((), device=x.device))
        descale = (descale / E4M3_MAX).reshape(1)
    descale = torch.where(descale > 0, descale, torch.ones_like(descale)).contiguous()
    if not per_head:
        scale = descale
    elif cu_seqlens is not None:
        scale = descale[sequence].repeat_interleave(group, dim=1)[:, :, None]
    else:
        scale = descale.repeat_interleave(group, dim=1)[:, None, :, None]
    quantized = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return quantized, descale


def quantize(q: "Tensor", k: "Tensor", v: "Tensor", *, per_head: bool = True,
             rotate_qk: bool = True, cu_seqlens_q: "Tensor" = None,
             cu_seqlens_k: "Tensor" = None
             ) -> Tuple["Tensor", "Tensor", "Tensor", Dict[str, "Tensor"]]:
    """(q8, k8, v8, descales): q [B, Sq, H, D], k and v [B, Sk, Hkv, D] (any float dtype, on
    one device) as torch.float8_e4m3fn tensors and the dict of q_descale, k_descale and
    v_descale (fp32) that attnjit.forward takes: one factor per batch row and KV head
    (per_head, [B, Hkv]; a query head takes its KV head's) or one per tensor ([1]), each
    mapping the largest magnitude it covers to 448. rotate_qk first rotates q and k by the
    orthonormal Hadamard matrix along the head dimension (D a power of two), which leaves the
    scores unchanged and spreads outliers. A packed batch (attnjit.attention_varlen's): q
    [total_q, H, D], k and v [total_k, Hkv, D] with cu_seqlens_q and cu_seqlens_k (int32
    [B + 1] on q's device), whose per_head factors are per sequence and KV head, [B, Hkv].
    Runs as a few torch operations on q's device (no host synchronization)."""
    import torch

    fp8 = getattr(torch, "float8_e4m3fn", None)
    if fp8 is None:
        raise AttnjitError(f"torch: version {torch.__version__} has no float8_e4m3fn; accepted: "
                           "PyTorch 2.1 or newer")
    packed = cu_seqlens_q is not None or cu_seqlens_k is not None
    if packed:
        for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            if (not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.dtype != torch.int32
                    or cu.shape[0] < 2 or cu.device != q.device):
                raise AttnjitError(f"{name}: got {type(cu).__name__} of shape "
                                   f"{tuple(getattr(cu, 'shape', ()))}; accepted: an int32 "
                                   "tensor [B + 1] on q's device, given with the other")
        if cu_seqlens_k.shape[0] != cu_seqlens_q.shape[0]:
            raise AttnjitError(f"cu_seqlens_k: shape {tuple(cu_seqlens_k.shape)}; accepted: "
                               f"{tuple(cu_seqlens_q.shape)}, as cu_seqlens_q")
    rank, layout = (3, "[total, heads, head_dim] (a packed batch)") if packed else \
        (4, "[batch, seq, heads, head_dim]")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != rank or not x.is_floating_point():
            raise AttnjitError(f"{name}: got {type(x).__name__} of shape "
                               f"{tuple(getattr(x, 'shape', ()))}; accepted: a float tensor "
                               f"{layout}")
    kv_heads = k.shape[-2]
    if kv_heads == 0 or q.shape[-2] % kv_heads != 0 or v.shape[-2] != kv_heads:
        raise AttnjitError(f"k: {kv_heads} heads (v {v.shape[-2]}); accepted: the same divisor "
                           f"of q's {q.shape[-2]} heads for k and v")
    if rotate_qk:
        q, k = rotate(q), rotate(k)
    q8, q_descale = _scaled(q, kv_heads, per_head, cu_seqlens_q)
    k8, k_descale = _scaled(k, kv_heads, per_head, cu_seqlens_k)
    v8, v_descale = _scaled(v, kv_heads, per_head, cu_seqlens_k)
    return q8, k8, v8, {"q_descale": q_descale, "k_descale": k_descale,
                        "v_descale": v_descale}
