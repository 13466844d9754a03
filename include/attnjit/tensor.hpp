// Non-owning views of device tensors and the runtime arguments of an attention launch.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace attnjit {

/// Element type of a tensor handed to a kernel.
/// e4m3: FP8 (OCP E4M3, one byte), the inputs of dtype=e4m3 specs (ATTNJIT_E4M3 in the C ABI).
enum class ScalarType : std::uint8_t { fp16, bf16, fp32, int32, e4m3 };

std::string_view name_of(ScalarType type);

/// A device tensor: pointer, element type, shape and strides (in elements). Up to rank 4.
struct TensorView {
  void* data = nullptr;
  ScalarType dtype = ScalarType::bf16;
  int rank = 0;
  std::array<std::int64_t, 4> shape{};
  std::array<std::int64_t, 4> stride{};

  bool empty() const { return data == nullptr && rank == 0; }
};

/// Builds a view with contiguous (row-major) strides.
TensorView contiguous_view(void* data, ScalarType dtype, std::initializer_list<std::int64_t> shape);

/// One int32 tensor of a predicate mask, bound to the name the predicate reads it by.
struct PredicateTensorArg {
  std::string name;
  TensorView tensor;  ///< int32 device tensor, [length] or [rows, length] contiguous, rows 1 or B
};

/// The runtime inputs of mask=predicate(...): the values of the scalar slots $0, $1, ... (the
/// lifted literals, exactly as many as the predicate has) and every tensor it reads, by name
/// (extra names are an error). New values and contents never recompile.
struct PredicateArgs {
  std::vector<std::int32_t> scalars;
  std::vector<PredicateTensorArg> tensors;
};

/// Device memory a launch may take its scratch buffers from (the FlashMask min/max tables,
/// CTA orders, predicate block tables and bits, the backward's fp32 dQ accumulator, row
/// statistics and GQA partials). `Kernel::workspace_size(args)` gives the bytes a launch
/// needs; `data` must be 256-byte aligned device memory of the stream's device, not used by
/// other work until the launch's kernels have finished on its stream. Empty (the default):
/// the launch takes stream-ordered memory itself (cuMemAllocAsync, freed after its kernels).
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

/// The sequence boundaries of a packed batch, for a spec with varlen=true (FlashAttention's
/// varlen arguments). The tensors are int32 device tensors, contiguous: cu_seqlens_q and
/// cu_seqlens_k [B + 1], 0 = cu[0] <= cu[1] <= ... <= cu[B] = total (q's, resp. k's, packed
/// rows), sequence s holding rows [cu[s], cu[s + 1]) (empty sequences allowed); seqused_k [B]
/// (optional): the keys of each sequence actually used, from its start (0 to its length).
/// max_seqlen_q/k bound the sequences' lengths. The host checks shapes and types only; the
/// values are checked on the device with validate_mask or ATTNJIT_DEBUG=1 (the launch then
/// waits for its stream). New values never recompile and never synchronize the host.
struct VarlenArgs {
  TensorView cu_seqlens_q, cu_seqlens_k;
  TensorView seqused_k;
  int max_seqlen_q = -1;  ///< required with varlen=true: >= the longest query sequence
  int max_seqlen_k = -1;  ///< required with varlen=true: >= the longest key sequence

  bool empty() const {
    return cu_seqlens_q.empty() && cu_seqlens_k.empty() && seqused_k.empty() &&
           max_seqlen_q == -1 && max_seqlen_k == -1;
  }
};

/// The KV cache of a spec with kv_cache=contiguous|paged (FlashAttention's
/// flash_attn_with_kvcache): ForwardArgs::k and v are the cache, contiguous
/// [B, capacity, Hkv, D] (resp. Dv), or paged pools [num_pages, page_size, Hkv, D] with any
/// strides of the row layout (so an HND pool [num_pages, Hkv, page_size, D] is passed as its
/// permuted view), page_size a power of two. q [B, Sq, H, D] holds each sequence's Sq new
/// tokens, the last Sq of its keys: a causal mask or a window is aligned to the bottom right of
/// each sequence's cached length. New lengths, tables and split counts never recompile, and a
/// launch takes no host synchronization and no allocation beyond its workspace, whose size
/// depends only on the shapes and num_splits (CUDA graphs may replay it with new contents).
struct KvCacheArgs {
  /// int32 [B], contiguous: the keys of each sequence (0 to its capacity); empty: every
  /// sequence holds its whole capacity.
  TensorView cache_seqlens;
  /// kv_cache=paged only: int32 [B, max_pages], last dim contiguous: entry [b, i] is the
  /// physical page of sequence b's keys [i page_size, (i + 1) page_size); pages may be shared
  /// between sequences. A sequence's capacity is max_pages x page_size.
  TensorView block_table;
  /// Key splits per sequence and KV head (Flash-Decoding): 0 chooses from the SM count and the
  /// shapes; 1 to 256 forces that many (each split's partial rows then go through the
  /// workspace and a merge kernel).
  int num_splits = 0;
  /// Keys and values to append (flash_attn_with_kvcache's k= and v=): [B, S_new, Hkv, D] and
  /// [B, S_new, Hkv, Dv] of the spec's dtype, last dim contiguous. The launch first writes them
  /// into the cache at positions cache_seqlens[b] .. cache_seqlens[b] + S_new - 1 (through the
  /// block table when paged; positions past the capacity are not written), then attends over
  /// cache_seqlens[b] + S_new keys. cache_seqlens is required with them and is not updated.
  /// Both empty: nothing is appended.
  TensorView k_new, v_new;
  /// Ragged new tokens (speculative decoding: a different count per sequence): int32 [B + 1],
  /// on the device, 0 = cu[0] <= cu[1] <= ... <= cu[B] = total_q; sequence b's new tokens are
  /// rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of q [total_q, H, D] and o
  /// [total_q, H, Dv] (and of k_new [total_q, Hkv, D] and v_new when appending: each sequence
  /// appends its own tokens), its LSEs columns of lse [H, total_q]. max_seqlen_q (at least the
  /// largest count) sizes the grid: a launch argument, never a recompile. Empty and 0: every
  /// sequence has q.shape[1] tokens.
  TensorView cu_seqlens_q;
  int max_seqlen_q = 0;
};

/// Everything a forward launch needs besides the compiled kernel.
///
/// Layouts: q [B, Sq, H, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv], o [B, Sq, H, Dv] with
/// any strides whose last dimension is contiguous (stride 1) and whose other strides are
/// multiples of 8 elements (16-byte rows); H must be a multiple of Hkv (GQA/MQA).
/// lse [B, H, Sq] fp32, contiguous in Sq; required iff the spec has return_lse=true.
/// startend_row_indices: int32 [B, Hm, Sk, C], contiguous, Hm in {1, Hkv}; flashmask only.
/// Over a KV cache (kv_cache=contiguous|paged) Sk is the capacity (max_pages x page_size when
/// paged) and the rows are positions in the sequence: a new token's row is its own key's index.
/// Score modifiers (AttentionSpec::softcap / alibi): softcap is the cap, a finite value > 0
/// when the spec has softcap=true and 0 otherwise; alibi_slopes is fp32 [H] (one slope per
/// query head), contiguous, in device memory, when the spec has alibi=true and empty
/// otherwise. sinks (AttentionSpec::sinks) likewise: fp32 [H] sink logits, one per query head,
/// contiguous and 4-byte aligned in device memory, when the spec has sinks=true and empty
/// otherwise. All are launch arguments: changing them never recompiles.
struct ForwardArgs {
  TensorView q, k, v, o;
  TensorView lse;
  TensorView startend_row_indices;
  float softmax_scale = 0.0f;  ///< 0 means 1/sqrt(head_dim_qk)
  int window_left = -1;        ///< sliding_window: keys left of the diagonal; -1 unbounded
  int window_right = 0;        ///< sliding_window: keys right of the diagonal; -1 unbounded
  /// Check startend_row_indices on the device first (attnjit::validate_intervals; waits for
  /// the stream). Always on when the environment has ATTNJIT_DEBUG=1.
  bool validate_mask = false;
  float softcap = 0.0f;     ///< softcap=true: the cap (> 0); otherwise 0
  TensorView alibi_slopes;  ///< alibi=true: fp32 [H]; otherwise empty
  TensorView sinks;         ///< sinks=true: fp32 [H] sink logits; otherwise empty
  /// dtype=e4m3 only (q, k, v e4m3, o bf16): the factors that turn the e4m3 values of q, k and
  /// v into the values they stand for (FlashAttention-3's descales), fp32 in device memory,
  /// [B, Hkv] contiguous (one per batch row and KV head; varlen: [sequences, Hkv], one per
  /// sequence) or [1] (one for the tensor); empty stands for 1. Launch arguments: new factors never
  /// recompile. A kv_dtype=e4m3 cache (16-bit q and o) takes k_descale and v_descale, the factors
  /// of its K and V, and no q_descale.
  TensorView q_descale, k_descale, v_descale;
  PredicateArgs predicate;  ///< mask=predicate only
  Workspace workspace;      ///< scratch memory; empty: stream-ordered allocation
  /// varlen=true only: the packed batch's boundaries. q [total_q, H, D], k [total_k, Hkv, D],
  /// v [total_k, Hkv, Dv], o [total_q, H, Dv], lse [H, total_q] (strides as above).
  VarlenArgs varlen;
  /// kv_cache=contiguous|paged only: the cache's lengths, block table and key splits.
  KvCacheArgs kv_cache;
};

/// Everything a backward launch needs besides the compiled kernel (a spec with
/// direction=backward). Layouts as in ForwardArgs: q [B, Sq, H, D], k [B, Sk, Hkv, D],
/// v [B, Sk, Hkv, Dv], o and d_o [B, Sq, H, Dv]; lse [B, H, Sq] fp32 as the forward pass
/// returned it (return_lse=true). Outputs, same dtype as q: d_q like q, d_k like k, d_v like v
/// (for GQA each KV head's gradient is the sum over its query heads). The mask arguments,
/// the softmax scale, the score modifiers' arguments and the sinks (as in ForwardArgs) must be
/// those of the forward pass. With sinks=true, d_sinks (fp32 [H], contiguous, 4-byte aligned)
/// receives the sinks' gradient: written whole by every call, never accumulated into.
struct BackwardArgs {
  TensorView q, k, v, o, d_o;
  TensorView lse;
  TensorView startend_row_indices;
  TensorView d_q, d_k, d_v;
  float softmax_scale = 0.0f;  ///< 0 means 1/sqrt(head_dim_qk)
  int window_left = -1;
  int window_right = 0;
  /// As ForwardArgs::validate_mask.
  bool validate_mask = false;
  float softcap = 0.0f;     ///< softcap=true: the cap (> 0); otherwise 0
  TensorView alibi_slopes;  ///< alibi=true: fp32 [H]; otherwise empty
  TensorView sinks;         ///< sinks=true: fp32 [H], the forward's; otherwise empty
  TensorView d_sinks;       ///< sinks=true: fp32 [H] output, the sinks' gradient; otherwise empty
  PredicateArgs predicate;  ///< mask=predicate only: those of the forward pass
  Workspace workspace;      ///< scratch memory; empty: stream-ordered allocation
  VarlenArgs varlen;        ///< varlen=true only: those of the forward pass
};

}  // namespace attnjit
