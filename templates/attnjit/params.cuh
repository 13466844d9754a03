// Kernel parameter blocks, shared verbatim by the host (which fills them) and the
// generated kernels (which take them by value). Plain C++: no CUDA keywords, fixed-size
// types only, so the layout is identical under g++ and NVRTC (LP64).
#pragma once

namespace attnjit {

/// Arguments of the forward kernel. Strides are in elements; the last dim is contiguous.
struct FwdParams {
  const void* q;         ///< [B, Sq, H, D]
  const void* k;         ///< [B, Sk, Hkv, D]
  const void* v;         ///< [B, Sk, Hkv, Dv]
  void* o;               ///< [B, Sq, H, Dv]
  float* lse;            ///< [B, H, Sq] (natural log); written only when the spec returns it
  const int* intervals;  ///< startend_row_indices [B, Hm, Sk, C]; flashmask only
  const int* minmax;     ///< per key block min/max [B, Hm, ceil(Sk/block_n), 2*C]
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
};

/// Arguments of the FlashMask min/max preprocessing kernel.
struct MinMaxParams {
  const int* intervals;  ///< [B, Hm, Sk, C]
  int* minmax;           ///< [B, Hm, num_key_blocks, 2*C]: (min, max) per vector
  int batch, mask_heads, seqlen_k, num_key_blocks;
};

}  // namespace attnjit
