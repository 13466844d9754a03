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


def _scaled(x, kv_heads, per_head):
    """(e4m3 x / descale, descale): descale fp32 [1], or [B, Hkv] with the query heads of a KV
    head sharing its factor, mapping the largest magnitude to E4M3_MAX (1 where all are 0)."""
    import torch

    batch, seqlen, heads, dim = x.shape
    magnitude = x.detach().abs().float()
    if per_head:
        groups = magnitude.reshape(batch, seqlen, kv_heads, heads // kv_heads, dim)
        descale = (groups.amax(dim=(1, 3, 4)) if x.numel() else
                   torch.zeros(batch, kv_heads, device=x.device)) / E4M3_MAX
    else:
        descale = (magnitude.amax() if x.numel() else torch.zeros((), device=x.device))
        descale = (descale / E4M3_MAX).reshape(1)
    descale = torch.where(descale > 0, descale, torch.ones_like(descale)).contiguous()
    scale = (descale.repeat_interleave(heads // kv_heads, dim=1)[:, None, :, None]
             if per_head else descale)
    quantized = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return quantized, descale


def quantize(q: "Tensor", k: "Tensor", v: "Tensor", *, per_head: bool = True,
             rotate_qk: bool = True) -> Tuple["Tensor", "Tensor", "Tensor", Dict[str, "Tensor"]]:
    """(q8, k8, v8, descales): q [B, Sq, H, D], k and v [B, Sk, Hkv, D] (any float dtype, on
    one device) as torch.float8_e4m3fn tensors and the dict of q_descale, k_descale and
    v_descale (fp32) that attnjit.forward takes: one factor per batch row and KV head
    (per_head, [B, Hkv]; a query head takes its KV head's) or one per tensor ([1]), each
    mapping the largest magnitude it covers to 448. rotate_qk first rotates q and k by the
    orthonormal Hadamard matrix along the head dimension (D a power of two), which leaves the
    scores unchanged and spreads outliers. Runs as a few torch operations on q's device."""
    import torch

    fp8 = getattr(torch, "float8_e4m3fn", None)
    if fp8 is None:
        raise AttnjitError(f"torch: version {torch.__version__} has no float8_e4m3fn; accepted: "
                           "PyTorch 2.1 or newer")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or not x.is_floating_point():
            raise AttnjitError(f"{name}: got {type(x).__name__} of shape "
                               f"{tuple(getattr(x, 'shape', ()))}; accepted: a float tensor "
                               "[batch, seq, heads, head_dim]")
    kv_heads = k.shape[2]
    if kv_heads == 0 or q.shape[2] % kv_heads != 0 or v.shape[2] != kv_heads:
        raise AttnjitError(f"k: {kv_heads} heads (v {v.shape[2]}); accepted: the same divisor "
                           f"of q's {q.shape[2]} heads for k and v")
    if rotate_qk:
        q, k = rotate(q), rotate(k)
    q8, q_descale = _scaled(q, kv_heads, per_head)
    k8, k_descale = _scaled(k, kv_heads, per_head)
    v8, v_descale = _scaled(v, kv_heads, per_head)
    return q8, k8, v8, {"q_descale": q_descale, "k_descale": k_descale,
                        "v_descale": v_descale}
