"""What compare.py runs: attnjit and its peers as attention(q, k, v) on attnjit's [B, S, H, D]
layout (SDPA and FlexAttention see [B, H, S, D] views of the same memory, no copies), and the
masks each one needs: attnjit's FlashMask vectors, FlexAttention's block mask, SDPA's dense
boolean mask, all from one family's parameters (families.py)."""

import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import attnjit
import families

compiled_flex = torch.compile(flex_attention)
_compiled_create_block_mask = None

# Masks of this many elements or more (B x H x N x N of the mask_mod's real dependence) are made
# by torch.compile(create_block_mask), which never materializes them; smaller ones eagerly.
EAGER_BLOCK_MASK_ELEMENTS = 1 << 32


class Implementation:
    """A named attention(q, k, v) on [B, S, H, D] tensors, run under an SDPA backend when
    `backend` is given."""

    def __init__(self, name, attention, backend=None):
        self.name = name
        self.attention = attention
        self.backend = backend

    def __call__(self, q, k, v):
        context = sdpa_kernel(self.backend) if self.backend is not None \
            else contextlib.nullcontext()
        with context:
            return self.attention(q, k, v)


def in_bhsd(function):
    """A peer taking [B, H, S, D] as an attention on attnjit's [B, S, H, D] views."""
    def attention(q, k, v):
        return function(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
    return attention


def attnjit_implementation(mask):
    return Implementation("attnjit", lambda q, k, v: attnjit.attention(q, k, v, mask=mask))


def sdpa_implementations(causal):
    """SDPA with its flash and cuDNN backends (full and causal masks only)."""
    sdpa = in_bhsd(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    return [Implementation("SDPA flash", sdpa, SDPBackend.FLASH_ATTENTION),
            Implementation("SDPA cuDNN", sdpa, SDPBackend.CUDNN_ATTENTION)]


def dense_implementation(visible):
    """SDPA with a dense boolean mask (True: attend), on the backend SDPA picks for it."""
    return Implementation("SDPA dense mask", in_bhsd(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=visible)))


def flex_implementation(block_mask):
    return Implementation("FlexAttention", in_bhsd(
        lambda q, k, v: compiled_flex(q, k, v, block_mask=block_mask)))


def device_tables(table_lists, device):
    """families.tables() as int32 tensors on `device`."""
    return {name: torch.tensor(rows, dtype=torch.int32, device=device)
            for name, rows in table_lists.items()}


def mask_extent(family, batch, mask_heads):
    """(B, H) of the family's real dependence: 1 where its rule reads no batch / head index."""
    return (batch if family in families.PER_BATCH else 1,
            mask_heads if family in families.PER_HEAD else 1)


def block_mask_builder(family, mask_mod, batch, mask_heads, seqlen, device):
    """(build, how): a function making FlexAttention's BlockMask, and how it makes it."""
    global _compiled_create_block_mask
    b, h = mask_extent(family, batch, mask_heads)
    size_b = batch if family in families.PER_BATCH else None
    size_h = mask_heads if family in families.PER_HEAD else None
    if b * h * seqlen * seqlen < EAGER_BLOCK_MASK_ELEMENTS:
        function, how = create_block_mask, "create_block_mask"
    else:
        if _compiled_create_block_mask is None:
            _compiled_create_block_mask = torch.compile(create_block_mask)
        function, how = _compiled_create_block_mask, "torch.compile(create_block_mask)"
    return (lambda: function(mask_mod, size_b, size_h, seqlen, seqlen, device=device)), how


def dense_mask_bytes(family, batch, mask_heads, seqlen):
    """Bytes of the boolean mask, times 3 for the additive mask SDPA derives from it."""
    b, h = mask_extent(family, batch, mask_heads)
    return 3 * b * h * seqlen * seqlen


def dense_mask(family, mask_mod, batch, mask_heads, seqlen, device):
    """The boolean mask [B or 1, H or 1, N, N] (True: visible) of a mask_mod, one sample at a
    time."""
    b_extent, h_extent = mask_extent(family, batch, mask_heads)
    visible = torch.empty((b_extent, h_extent, seqlen, seqlen), dtype=torch.bool, device=device)
    h = torch.arange(h_extent, device=device)[:, None, None]
    q = torch.arange(seqlen, device=device)[None, :, None]
    k = torch.arange(seqlen, device=device)[None, None, :]
    for b in range(b_extent):
        visible[b] = mask_mod(b, h, q, k)
    return visible


def _offsets(rows, seqlen, device):
    """cu_seqlens-style offsets [B, S + 1] of per-sample segment lengths, rows padded with N."""
    width = max(len(lengths) for lengths in rows) + 1
    table = []
    for lengths in rows:
        offsets = [0]
        for length in lengths:
            offsets.append(offsets[-1] + length)
        table.append(offsets + [seqlen] * (width - len(offsets)))
    return torch.tensor(table, dtype=torch.int32, device=device)


def _per_sample(values, device):
    return torch.tensor(list(values), dtype=torch.int32, device=device)


def device_arguments(family, params, seqlen, batch, device):
    """attnjit.build_mask keyword arguments equivalent to the host builders' `params`, or
    (None, why) for a family whose benchmark parameters the device builders do not take
    (packed share-question samples; eviction rows drawn on the host)."""
    if family == "sliding_window":
        return {"window": params["window"]}, ""
    if family == "global_sliding_window":
        return {"global_tokens": params["global_tokens"], "window_left": params["left"],
                "window_right": params["right"]}, ""
    if family == "prefix_lm_causal":
        return {"prefix": _per_sample([params["prefix"]] * batch, device)}, ""
    if family in ("causal_document", "document"):
        return {"offsets": _offsets(params["doc_lengths"], seqlen, device)}, ""
    if family == "prefix_lm_document":
        docs = params["doc_lengths"]
        width = max(len(lengths) for lengths in docs)
        prefixes = [list(p) + [0] * (width - len(p)) for p in params["prefixes"]]
        return {"offsets": _offsets(docs, seqlen, device),
                "prefixes": torch.tensor(prefixes, dtype=torch.int32, device=device)}, ""
    if family == "causal_blockwise":
        return {"offsets": _offsets(params["blocks"], seqlen, device),
                "test": _per_sample(params["test"], device)}, ""
    if family == "qk_sparse":
        return {"dropped_start": _per_sample(params["offset"], device),
                "dropped_length": _per_sample(params["length"], device)}, ""
    return None, (f"attnjit.build_mask: {family}'s benchmark parameters (packed samples or "
                  "host-drawn rows) have no device form; host builders timed")


def device_build(family, params, seqlen, batch, mask_heads, device, host_mask):
    """Builds the vectors with attnjit.build_mask (the device-side builders) from the same
    parameters as the host builders, and checks them against `host_mask`. Returns (build,
    note): a function running the build and returning its tensor, or None with the reason
    ("" when the package has no attnjit.build_mask)."""
    build_mask = getattr(attnjit, "build_mask", None)
    if build_mask is None:
        return None, ""

    kwargs, note = device_arguments(family, params, seqlen, batch, device)
    if kwargs is None:
        return None, note

    def build():
        built = build_mask(family, seqlen, batch=batch, heads=mask_heads, device=device,
                           **kwargs)
        tensor = built[1] if isinstance(built, tuple) else built.startend_row_indices
        torch.cuda.synchronize()
        return tensor

    try:
        tensor = build()
        expected = host_mask.startend_row_indices.to(tensor.device)
        same = tuple(tensor.shape) == tuple(expected.shape) and torch.equal(tensor, expected)
    except Exception as error:  # an API that takes other parameters: keep the host builders
        text = (str(error).splitlines() or [""])[0][:200]
        return None, f"attnjit.build_mask failed: {type(error).__name__}: {text}"
    if not same:
        raise AssertionError(f"{family}: attnjit.build_mask's vectors differ from the host "
                             "builders' for the same parameters")
    return build, ""


def timed(function, repeats):
    """(first call ms, median ms of `repeats` more calls, last result); host clock around a
    device synchronization, for work that mixes host and device steps."""
    times, result = [], None
    for _ in range(repeats + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = function()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return times[0], statistics.median(times[1:]), result
