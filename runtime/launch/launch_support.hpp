// Shared by Kernel::forward and Kernel::backward: the checks of the attention tensors against
// the spec, the caller's workspace or stream-ordered scratch memory.
#pragma once

#include <cuda.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "attnjit/common/params.cuh"
#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"

namespace attnjit {
struct KernelPlan;
}  // namespace attnjit

namespace attnjit::jit::detail {

/// The problem sizes the tensors agree on.
struct Shapes {
  int batch = 0, seqlen_q = 0, seqlen_k = 0, heads = 0, kv_heads = 0, mask_heads = 1;
  /// kv_cache specs: a decode launch (seqlen_k is each sequence's capacity) and the key splits
  /// it asks for (0: chosen by launch_extents).
  bool decode = false;
  bool paged = false;   ///< a paged cache
  int head_dim_qk = 0;  ///< the spec's (decode_splits reads it)
  bool fp8_kv = false;  ///< an e4m3 cache (kv_dtype; decode_splits reads it)
  int num_splits = 0;
  int new_tokens = 0;  ///< rows appended to each sequence (KvCacheArgs::k_new), else 0
  /// kv_cache specs: the launch may run the plan's prefill kernel instead of the decode kernel
  /// (allow_prefill); runs_prefill decides.
  bool prefill_allowed = false;
};

/// The most key splits of a decode launch.
constexpr int kMaxDecodeSplits = 256;

/// Checks a kv_cache spec's cache arguments (KvCacheArgs, and k/v as a cache: contiguous
/// [B, capacity, Hkv, D], paged [num_pages, page_size, Hkv, D] with page_size a power of two);
/// sets `s`'s seqlen_k (the capacity per sequence), decode and num_splits. Throws Error naming
/// the field, the value and what is accepted.
void check_kv_cache(const AttentionSpec& spec, const ForwardArgs& args, Shapes& s);

/// Under ATTNJIT_DEBUG=1, before any launch of the call: waits for `stream` and reads back
/// cu_seqlens_q (ragged new tokens, `total_q` rows), the cache's lengths and the block table
/// entries they use. Throws Error naming the first bad boundary, cache_seqlens[b] outside
/// [0, capacity - appended rows] or block_table[b][i] that is not a page of k and v, so a
/// refused call writes nothing.
void check_kv_cache_contents(const AttentionSpec& spec, const ForwardArgs& args, const Shapes& s,
                             std::int64_t total_q, CUstream stream);

/// A kv_cache launch with ragged new tokens (KvCacheArgs::cu_seqlens_q): checks q, o
/// [total_q, H, D], lse [H, total_q], k_new/v_new [total_q, Hkv, D] and cu_seqlens_q, and
/// returns the arguments with those as padded views [B, max_seqlen_q, ...] of batch stride 0
/// (the kernels start each sequence at its cu_seqlens_q row). nullopt without cu_seqlens_q.
std::optional<ForwardArgs> ragged_as_batch(const AttentionSpec& spec, const ForwardArgs& args);

/// What a kv_cache spec's launch adds to the shapes of q and k (Kernel::workspace_size, which
/// checks no values): decode, num_splits, a paged cache's capacity and the appended rows.
void add_kv_cache_shapes(const AttentionSpec& spec, const ForwardArgs& args, Shapes& s);

/// Sets s.prefill_allowed: whether a kv_cache launch of `plan` may run its prefill kernel. It
/// may where the plan has one and the call leaves the key splits to attnjit (num_splits 0; a
/// split count asks for the decode kernel) and has pages of at least 8 rows (the TMA boxes of a
/// block start on whole swizzle atoms).
void allow_prefill(const KernelPlan& plan, const ForwardArgs& args, Shapes& s);

/// The cache's fields of FwdParams (the plan sets num_splits and the partial buffers).
void fill_kv_cache(KvCacheInputs& p, const AttentionSpec& spec, const ForwardArgs& args);

/// Checks q, k, v, o, lse, startend_row_indices, the window sizes, the scale and the score
/// modifiers' arguments of `args` (ForwardArgs or BackwardArgs) against `spec`; throws Error
/// naming the first bad field.
template <class Args>
Shapes check_args(const AttentionSpec& spec, const Args& args, bool lse_required);

/// The element type of q, k and v (and of the backward's tensors) for the spec's dtype, and of
/// o (bf16 for e4m3 inputs).
ScalarType input_type(DType dtype);
ScalarType output_type(DType dtype);

/// dtype=e4m3: checks ForwardArgs' q_descale, k_descale, v_descale (fp32 [B, Hkv] contiguous or
/// [1], device memory) and binds them; other dtypes: refuses any of them.
void fill_descales(FwdParams& p, const AttentionSpec& spec, const ForwardArgs& a, const Shapes& s);

/// Checks softcap, alibi_slopes and sinks (and a backward's d_sinks) of `args` against the
/// spec's softcap/alibi/sinks flags: a finite cap > 0 with softcap=true, else 0; fp32 [heads]
/// contiguous, 4-byte aligned tensors with alibi=true, resp. sinks=true, else none. Throws
/// Error naming the field, the value and what is accepted.
template <class Args>
void check_score_mod_args(const AttentionSpec& spec, const Args& args, int heads);

/// What the kernels' 16-byte copies need of an activation of any rank: a contiguous last dim,
/// other strides non-negative multiples of 8 elements, a 16-byte aligned start, a span the
/// offset arithmetic covers. Throws Error naming `name`'s field.
void check_row_layout(std::string_view name, const TensorView& t);

/// The most batch rows and heads: the attention grids' y and z dimensions.
constexpr std::int64_t kMaxGridYZ = 65535;

/// A leading dim of an activation: its name in messages and its largest extent.
struct LeadingDim {
  std::string_view name;
  std::int64_t max;
};

/// Under kv_dtype, that `t` (a cache, or keys and values to append to it) is of that type; the
/// message names kv_dtype rather than dtype.
void check_cache_type(std::string_view name, const TensorView& t, const AttentionSpec& spec);

/// An activation of the spec's dtype with `dims` leading dims and the head dim last, each
/// extent in range (`rank_text` says the accepted rank), in a layout check_row_layout takes;
/// throws Error naming `name`'s field.
void check_activation(std::string_view name, const TensorView& t, ScalarType dtype, int head_dim,
                      std::initializer_list<LeadingDim> dims, std::string_view rank_text);

/// Error naming `name`'s widest stride unless t's strides are >= 0 and its largest element
/// offset stays within 2^48 bytes.
void check_span(std::string_view name, const TensorView& t);

/// Error naming `name`'s stride where an output's elements would overlap (zero strides, rows
/// closer than what the smaller strides span).
void check_no_overlap(std::string_view name, const TensorView& t);

/// A packed batch's LSE: fp32 [heads, total_q], contiguous in total_q; `why` says in the rank's
/// message why the rank is 2 (e.g. "the spec has varlen=true").
void check_packed_lse(const TensorView& lse, std::int64_t heads, std::int64_t total_q,
                      std::string_view why);

/// Error naming `field` unless got == expected (`what`: the expected value's meaning).
void check_same(std::string_view field, std::int64_t got, std::int64_t expected,
                std::string_view what);

/// Checks that `t` has the dtype and shape of `like` and a valid layout (contiguous last
/// dim, 16-byte rows, 16-byte aligned data); the message names `name` and `like_name`.
void check_same_layout(std::string_view name, const TensorView& t, std::string_view like_name,
                       const TensorView& like);

/// The problem sizes of `args` (ForwardArgs or BackwardArgs) from the shapes of q, k and
/// startend_row_indices alone, for Kernel::workspace_size: data pointers may be null. A packed
/// batch (`varlen` not off) is one batch row of [total, heads, dim] tensors. Throws Error
/// naming a tensor whose rank is not 4 (packed: 3) or whose extent leaves int.
template <class Args>
Shapes launch_shapes(const Args& args, VarlenMode varlen);

/// Checks a caller's workspace: device memory (`data` not null, 256-byte aligned) of at least
/// `needed` bytes; throws Error naming workspace.data or workspace.bytes.
void check_workspace(const Workspace& workspace, std::size_t needed);

/// Device memory from the stream-ordered pool, returned to it after the work queued on the
/// stream (cuMemAllocAsync / cuMemFreeAsync).
class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, CUstream stream);
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  ~StreamScratch();
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(static_cast<std::uintptr_t>(ptr_));
  }

 private:
  CUdeviceptr ptr_ = 0;
  CUstream stream_;
};

/// The batch, row and head strides of a [B, S, H, D] tensor.
inline void set_strides(const TensorView& t, long long& batch, long long& row, long long& head) {
  batch = t.stride[0];
  row = t.stride[1];
  head = t.stride[2];
}

/// The fields FwdParams and BwdParams share (same names): q, k, v, o and their strides, the
/// LSE, the FlashMask vectors, the sizes, the softmax scale (0: 1/sqrt(head_dim_qk)), the
/// window and the score modifiers' arguments.
template <class Params, class Args>
void fill_common_params(Params& p, const AttentionSpec& spec, const Args& a, const Shapes& s) {
  p.q = a.q.data;
  p.k = a.k.data;
  p.v = a.v.data;
  p.o = a.o.data;
  p.lse = static_cast<float*>(a.lse.data);
  p.intervals = static_cast<const int*>(a.startend_row_indices.data);
  set_strides(a.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
  set_strides(a.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  set_strides(a.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  set_strides(a.o, p.o_batch_stride, p.o_row_stride, p.o_head_stride);
  p.lse_batch_stride = a.lse.stride[0];
  p.lse_head_stride = a.lse.stride[1];
  p.batch = s.batch;
  p.heads = s.heads;
  p.kv_heads = s.kv_heads;
  p.mask_heads = s.mask_heads;
  p.seqlen_q = s.seqlen_q;
  p.seqlen_k = s.seqlen_k;
  p.softmax_scale = a.softmax_scale > 0.f ? a.softmax_scale
                                          : 1.f / std::sqrt(static_cast<float>(spec.head_dim_qk));
  p.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  p.softcap = a.softcap;
  p.softcap_exp2 = a.softcap > 0.f ? 2.f * p.scale_log2 / a.softcap : 0.f;
  p.softcap_log2 = a.softcap * 1.4426950408889634f;
  p.alibi_slopes = static_cast<const float*>(a.alibi_slopes.data);
  p.sinks = static_cast<const float*>(a.sinks.data);
}

/// `args` with the spec's predicate literals as its scalars (Kernel::predicate_scalars), when
/// the launch gives none and the spec has some; nothing otherwise (launch `args` as they are).
template <class Args>
std::optional<Args> with_spec_scalars(const Args& args, const std::vector<std::int32_t>& scalars) {
  if (!args.predicate.scalars.empty() || scalars.empty()) return std::nullopt;
  Args with_scalars = args;
  with_scalars.predicate.scalars = scalars;
  return with_scalars;
}

}  // namespace attnjit::jit::detail
