// Kernel parameter blocks, shared verbatim by the host (which fills them) and the
// generated kernels (which take them by value). Plain C++: no CUDA keywords, fixed-size
// types only, so the layout is identical under g++ and NVRTC (LP64).
#pragma once

namespace attnjit {

/// Limits of a predicate mask's runtime inputs (validate checks them).
constexpr int kMaxPredicateTensors = 8;
constexpr int kMaxPredicateScalars = 16;

/// The runtime inputs of an element predicate (mask=predicate): its int32 tensors in the order
/// of PredicateInfo::tensors and the values of its scalar slots $0, $1, ...
struct PredicateInputs {
  const int* tensors[kMaxPredicateTensors];           ///< row 0 of each tensor [rows, length]
  long long tensor_row_stride[kMaxPredicateTensors];  ///< 0 when rows == 1, else length
  int tensor_length[kMaxPredicateTensors];
  int scalars[kMaxPredicateScalars];
};

/// The sequence boundaries of a packed batch (varlen=true), which varlen_intervals.cuh turns
/// into the FlashMask vectors of the packed keys; zero and null otherwise.
struct VarlenInputs {
  const int* cu_seqlens_q;  ///< [sequences + 1]: sequence s has queries [cu_q[s], cu_q[s + 1])
  const int* cu_seqlens_k;  ///< [sequences + 1]: its keys [cu_k[s], cu_k[s + 1])
  const int* seqused_k;     ///< [sequences]: keys of s actually used, or null (all)
  /// The user's FlashMask vectors, rows local to each sequence: startend_row_indices
  /// [1, Hm, total_k, C]; null without.
  const int* mask_vectors;
  int* intervals;  ///< out: the kernels' vectors of every packed key, [Hm, total_k, columns]
  /// The first bad boundary as (entry << 4) | code (varlen_intervals.cuh), reduced by
  /// atomicMin; null: not checked.
  unsigned long long* first_error;
  int sequences;
  int max_seqlen_q, max_seqlen_k;
};

/// The arguments every attention kernel takes (FwdParams and BwdParams derive from it, so the
/// host fills them by the same names and the mask, score and schedule hooks read them alike).
/// Strides are in elements; the last dim is contiguous.
struct AttentionParams {
  const void* q;         ///< [B, Sq, H, D]
  const void* k;         ///< [B, Sk, Hkv, D]
  const void* v;         ///< [B, Sk, Hkv, Dv]
  const int* intervals;  ///< startend_row_indices [B, Hm, Sk, C]; flashmask only
  /// FlashMask: min/max per key block [B, Hm, ceil(Sk/block_n), 2*C] of the kernel's block_n
  /// (the backward's main kernel); predicate: the block table (int32 per tile of the kernel's
  /// shape, see PredicateBlocksParams).
  const int* minmax;
  long long q_batch_stride, q_row_stride, q_head_stride;
  long long k_batch_stride, k_row_stride, k_head_stride;
  long long v_batch_stride, v_row_stride, v_head_stride;
  long long o_batch_stride, o_row_stride, o_head_stride;
  long long lse_batch_stride, lse_head_stride;
  int batch, heads, kv_heads, mask_heads;
  int seqlen_q, seqlen_k;
  float softmax_scale;  ///< scale applied to Q K^T
  float scale_log2;     ///< softmax_scale * log2(e): scores go through exp2
  int window_left;      ///< sliding window; < 0 means unbounded
  int window_right;
  const float* alibi_slopes;  ///< [H] fp32; alibi only
  float softcap;              ///< cap of s <- cap * tanh(s / cap); softcap only
  float softcap_exp2;         ///< 2 * scale_log2 / softcap: e^(2 s / cap) = 2^(q.k * this)
  float softcap_log2;         ///< softcap * log2(e)
  const float* sinks;         ///< [H] fp32 sink logits; sinks only
  /// mask=predicate: the predicate's inputs, and the element bits of the partial tiles of
  /// `minmax`'s table (query rows; key rows for the backward's main kernel).
  PredicateInputs predicate;
  const unsigned* predicate_bits;
  /// The order in which the CTAs take their work (cta_order.cuh): entry i is the natural
  /// index of the CTA launched i-th; null for the index order of schedule.cuh. The backward
  /// host sets the main kernel's before its launch and the dQ kernel's before that one.
  const int* cta_order;
  VarlenInputs varlen;
};

/// A TMA tensor map: the 128 opaque bytes of the driver's CUtensorMap (64-byte aligned),
/// encoded on the host (runtime/launch/tma.cpp, cuTensorMapEncodeTiled) and passed by value as a
/// `const __grid_constant__` kernel parameter, whose address the TMA instructions take
/// (tma.cuh). cuda.h, which defines CUtensorMap, cannot be included under NVRTC.
struct alignas(64) TensorMap {
  unsigned long long words[16];
};

/// The tensor maps of the sm90a forward kernel (sm90a/forward.cuh), its second parameter. Each
/// views a [B, S, H, D] tensor as 4-D (D, S, H, B) with the tensor's strides and a box of one
/// 64-column panel (128-byte swizzle) of the rows one copy moves: q kBlockM rows, k and v
/// kBlockN rows, o the 64 rows of one consumer warpgroup.
struct FwdTensorMaps {
  TensorMap q, k, v, o;
};

/// The tensor maps of the sm90a backward kernel (sm90a/backward.cuh), its second parameter, as
/// FwdTensorMaps' views: q and d_o boxes of the kernel's kBlockM rows, k and v of kBlockN,
/// d_k and d_v the 64 keys of one consumer warpgroup.
struct BwdTensorMaps {
  TensorMap q, d_o, k, v;
  TensorMap dq_accum;  ///< fp32 [B, H, Sq, D] as (D, Sq, H, B), boxes of 32 columns x block_m rows
  TensorMap d_k, d_v;
  /// Under GQA: dk_partial / dv_partial as fp32 [B, Hkv, Sk, D], boxes of 32 columns x 64 rows
  TensorMap dk_sum, dv_sum;
};

/// The KV cache of a decode launch (kv_cache=contiguous|paged; decode.cuh). Its k and v are
/// AttentionParams' k and v: contiguous [B, capacity, Hkv, D] (batch stride per sequence), paged
/// [num_pages, page_size, Hkv, D] (batch stride per page). Zero otherwise.
struct KvCacheInputs {
  const int* cache_seqlens;  ///< [B]: keys of sequence b; null: every sequence has seqlen_k
  const int* block_table;    ///< paged: [B, max_pages], physical page of each logical page
  long long block_table_stride;
  int page_shift;            ///< paged: log2(page_size)
  int num_pages;             ///< paged: the pages of the pool (k.shape[0])
  int total_q;               ///< ragged new tokens: the packed rows of q and o, else 0
  int num_splits;            ///< key splits per (sequence, KV head); 1 writes o and lse directly
  /// Ragged new tokens: int32 [B + 1], sequence b's tokens are the packed rows
  /// cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of q, o and k_new/v_new (whose batch strides
  /// are 0), its LSEs at those columns of lse [H, total_q]; seqlen_q is then max_seqlen_q, the
  /// most tokens a sequence has. Null: every sequence has seqlen_q tokens.
  const int* cu_seqlens_q;
  /// Appended keys (kv_append.cuh): k_new [B, new_tokens, Hkv, D] and v_new [.., Dv], written
  /// into the cache at positions cache_seqlens[b] + t before the attention, which then sees
  /// cache_seqlens[b] + new_tokens keys; null and 0 without.
  const void* k_new;
  const void* v_new;
  long long k_new_batch_stride, k_new_row_stride, k_new_head_stride;
  long long v_new_batch_stride, v_new_row_stride, v_new_head_stride;
  int new_tokens;
  /// num_splits > 1: each split's output rows, normalized, fp32 [splits, B, Sq, H, Dv], and
  /// their LSEs (natural log, -inf for a split without a visible key) [splits, B, Sq, H];
  /// decode_combine.cuh merges them into o and lse.
  float* o_partial;
  float* lse_partial;
};

/// Arguments of the forward kernel.
struct FwdParams : AttentionParams {
  void* o;     ///< [B, Sq, H, Dv]
  float* lse;  ///< [B, H, Sq] (natural log); written only when the spec returns it
  /// Persistent kernels: the works drawn so far beyond each CTA's first (zeroed before the
  /// launch); null otherwise.
  unsigned* work_counter;
  KvCacheInputs kv_cache;  ///< kv_cache specs only
  /// dtype=e4m3: the factors that turn Q, K and V's e4m3 values into theirs (FlashAttention-3's
  /// q_descale, k_descale, v_descale), fp32 [B, Hkv] contiguous (a packed batch's: [sequences,
  /// Hkv]), or one factor for the tensor where bit 0, 1, 2 (q, k, v) of descale_per_tensor is
  /// set; a null one stands for 1.
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  int descale_per_tensor;
  /// Nonzero: a packed batch whose factors differ by sequence, applied per query row (a row
  /// sees keys of its own sequence only, so its scores and output take its sequence's factors).
  int descale_rows;
};

/// Arguments of the backward kernels. Scratch buffers (fp32, contiguous) belong to one
/// backward call.
struct BwdParams : AttentionParams {
  const void* o;      ///< [B, Sq, H, D], the forward output
  const float* lse;   ///< [B, H, Sq] from the forward pass (natural log)
  const void* d_o;    ///< [B, Sq, H, D]
  void* d_q;          ///< [B, Sq, H, D]
  void* d_k;          ///< [B, Sk, Hkv, D]
  void* d_v;          ///< [B, Sk, Hkv, D]
  float* dq_accum;    ///< [B, H, Sq, D]: sum over key blocks of dS K (atomics), or null
  /// [B, H, query blocks, lanes]: turn counters of the deterministic sm90a backward, which
  /// orders each query block's dQ reductions by key block (zeroed); else null
  int* dq_turns;
  float* row_dot;     ///< [B, H, Sq]: D = rowsum(dO * O)
  float* lse_log2;    ///< [B, H, Sq]: LSE * log2(e); +inf where no key is visible
  float* d_sinks;     ///< [H] fp32: the sinks' gradient (backward_sinks writes it); sinks only
  float* dk_partial;  ///< H != Hkv: per-query-head dK [B, H, Sk, D] or sums [B, Hkv, Sk, D]
  float* dv_partial;  ///< the same for dV (sums: the sm90a backward's atomic mode, zeroed)
  /// The query heads each CTA of the sm90a backward main kernel walks, one after another, all
  /// of one KV head: H / Hkv where the launch groups them (dK and dV then summed in the CTA's
  /// registers: dk_partial and dv_partial null), else 1. Its grid counts H / head_group heads.
  int head_group;
  /// min/max per key block of the dQ kernel's block_n, or its predicate block table
  const int* minmax_dq;
  /// mask=predicate: the element bits of the partial tiles of `minmax_dq` (query rows)
  const unsigned* predicate_bits_dq;
  long long do_batch_stride, do_row_stride, do_head_stride;
  long long dq_batch_stride, dq_row_stride, dq_head_stride;
  long long dk_batch_stride, dk_row_stride, dk_head_stride;
  long long dv_batch_stride, dv_row_stride, dv_head_stride;
};

/// Arguments of the FlashMask min/max preprocessing kernel.
struct MinMaxParams {
  const int* intervals;  ///< [B, Hm, Sk, C]
  int* minmax;           ///< [B, Hm, num_key_blocks, 2*C]: (min, max) per vector
  int batch, mask_heads, seqlen_k, num_key_blocks;
};

/// Arguments of the block classification kernel of a predicate mask: for every tile
/// (batch row, head row, query block, key block) of the consuming kernel's tile shape, whether
/// its elements are all hidden (kTileSkip), mixed (kTilePartial) or all visible (kTileFull),
/// and the element bits of partial tiles while slots last (predicate_blocks.cuh).
/// Keys past Sk count as hidden, queries past Sq are ignored.
struct PredicateBlocksParams {
  PredicateInputs predicate;
  int* table;           ///< [table_batch, table_heads, blocks_m, blocks_n]
  unsigned* bits;       ///< [bits_capacity, slot words] element bits of partial tiles
  unsigned* bits_used;  ///< slots taken (zeroed before the launch); may exceed the capacity
  int bits_capacity;    ///< slots in `bits`; 0: every partial tile evaluates the predicate
  int table_batch;      ///< B when the predicate depends on b or reads a tensor, else 1
  int table_heads;      ///< H when the predicate depends on h, else 1
  int seqlen_q, seqlen_k;
  int blocks_m, blocks_n;
  VarlenInputs varlen;  ///< a packed batch's boundaries (varlen), else zero
  /// Over a KV cache (the prefill kernel's table): each sequence's new tokens and keys; seqlen_q
  /// is then the most new tokens a sequence has, seqlen_k the capacity. Else zero.
  KvCacheInputs kv_cache;
};

/// Arguments of the CTA-order kernel (cta_order.cuh) of one attention kernel, whose own
/// arguments (Params: FwdParams or BwdParams) give the shapes and the mask data. It runs in
/// two launches: phase 0, one warp per CTA of the attention grid, writes each CTA's cost;
/// phase 1, one CTA, sorts the CTAs by cost, heaviest first, stable in the natural order.
template <class Params>
struct CtaOrderParams {
  Params attention;
  const int* table;  ///< the attention kernel's min/max tables or predicate block table
  int* cost;         ///< [grid CTAs]: phase 0 writes, phase 1 reads; -1 for an empty CTA
  int* order;        ///< [grid CTAs]: phase 1 writes order[launch position] = natural index
  int grid_x, grid_y, grid_z;  ///< the attention kernel's grid (schedule.cuh)
  int max_cost;                ///< an upper bound of the costs: the scale of the sort's buckets
  int group_pairs;             ///< head pairs per sorted group (cta_order.cuh), >= 1
  int phase;
};

}  // namespace attnjit
