// A plain fp32 attention forward used to check the fused kernels on large problems:
// one CTA per (query row, head, batch), every score kept in shared memory, the mask
// evaluated element by element straight from docs/masks.md or from the generated predicate
// (no tiles, no skipping, no block table), the score modifiers straight from their definition
// (tanhf, nothing shared with score_mod.cuh), the sink (kSinks) as one more term of the row's
// sum without a value. Slow on purpose; correct by inspection.
//
// Dynamic shared memory: (kHeadDimQK + Sk) floats and 4 of slack (the launch's).
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/masks/predicate.cuh"

namespace attnjit {

enum ReferenceMask {
  kRefNone = 0,
  kRefCausal = 1,
  kRefWindow = 2,
  kRefFlashmask = 3,
  kRefPredicate = 4
};

/// The Visible of a reference kernel without a predicate.
struct NoPredicate {
  static __device__ __forceinline__ bool visible(const PredicateInputs&, int, int, int, int) {
    return true;
  }
};

template <int kMask, bool kFlashCausal, int kColumns, class Visible>
__device__ __forceinline__ bool reference_masked(const FwdParams& p, const int* column_values,
                                                 int batch, int head, int row, int col) {
  if (kMask == kRefPredicate) return !Visible::visible(p.predicate, batch, head, row, col);
  const int diagonal = p.seqlen_k - p.seqlen_q;
  if (kMask == kRefCausal) return col > row + diagonal;
  if (kMask == kRefWindow) {
    const bool left = p.window_left >= 0 && col < row + diagonal - p.window_left;
    const bool right = p.window_right >= 0 && col > row + diagonal + p.window_right;
    return left || right;
  }
  if (kMask == kRefFlashmask) {
    const int* v = column_values + static_cast<long long>(col) * kColumns;
    if (kFlashCausal) {
      if (col > row + diagonal) return true;
      if (kColumns == 1) return row >= v[0];
      return row >= v[0] && row < v[1];
    }
    if (kColumns == 2) return row >= v[0] || row < v[1];
    return (row >= v[0] && row < v[1]) || (row >= v[2] && row < v[3]);
  }
  return false;
}

template <class Element>
__device__ __forceinline__ float block_reduce(float value, bool is_max, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = is_max ? fmaxf(value, other) : value + other;
  }
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = value;
  __syncthreads();
  float out = scratch[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
    out = is_max ? fmaxf(out, scratch[w]) : out + scratch[w];
  }
  __syncthreads();
  return out;
}

/// s <- cap * tanh(s / cap) (kSoftcap), then s <- s + slope[head] * (col - (row + Sk - Sq))
/// (kAlibi).
template <bool kSoftcap, bool kAlibi>
__device__ __forceinline__ float reference_score_mod(const FwdParams& p, float score, int head,
                                                     int row, int col) {
  if (kSoftcap) score = p.softcap * tanhf(score / p.softcap);
  if (kAlibi) {
    score += p.alibi_slopes[head] * static_cast<float>(col - (row + p.seqlen_k - p.seqlen_q));
  }
  return score;
}

/// Q and K have kHeadDimQK columns, V and O kHeadDimV.
template <class Element, int kHeadDimQK, int kHeadDimV, int kMask, bool kFlashCausal, int kColumns,
          bool kLse, bool kSinks, bool kSoftcap, bool kAlibi, class Visible = NoPredicate>
__device__ __forceinline__ void reference_attention(const FwdParams& p) {
  extern __shared__ float ref_smem[];
  __shared__ float scratch[32];
  float* q_row = ref_smem;
  float* scores = ref_smem + kHeadDimQK;
  const int row = blockIdx.x;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int kv_head = head / (p.heads / p.kv_heads);
  const int mask_head = kMask == kRefFlashmask ? head / (p.heads / p.mask_heads) : 0;
  const int* column_values =
      kMask == kRefFlashmask
          ? p.intervals +
                (static_cast<long long>(batch) * p.mask_heads + mask_head) * p.seqlen_k * kColumns
          : 0;

  const u16* q = static_cast<const u16*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride +
                 row * p.q_row_stride;
  const u16* k =
      static_cast<const u16*>(p.k) + batch * p.k_batch_stride + kv_head * p.k_head_stride;
  const u16* v =
      static_cast<const u16*>(p.v) + batch * p.v_batch_stride + kv_head * p.v_head_stride;
  for (int d = threadIdx.x; d < kHeadDimQK; d += blockDim.x) q_row[d] = to_float<Element>(q[d]);
  __syncthreads();

  float local_max = negative_infinity();
  for (int j = threadIdx.x; j < p.seqlen_k; j += blockDim.x) {
    float score = negative_infinity();
    if (!reference_masked<kMask, kFlashCausal, kColumns, Visible>(p, column_values, batch, head,
                                                                  row, j)) {
      const u16* key = k + j * p.k_row_stride;
      float dot = 0.f;
      for (int d = 0; d < kHeadDimQK; ++d) dot += q_row[d] * to_float<Element>(key[d]);
      score = reference_score_mod<kSoftcap, kAlibi>(p, dot * p.softmax_scale, head, row, j);
    }
    scores[j] = score;
    local_max = fmaxf(local_max, score);
  }
  const float sink = kSinks ? p.sinks[head] : negative_infinity();
  const float scores_max = block_reduce<Element>(local_max, true, scratch);
  const float row_max = fmaxf(scores_max, sink);

  float local_sum = 0.f;
  for (int j = threadIdx.x; j < p.seqlen_k; j += blockDim.x) {
    const float weight = scores[j] == negative_infinity() ? 0.f : expf(scores[j] - row_max);
    scores[j] = weight;
    local_sum += weight;
  }
  // The sink's term: exp(t - max), once per row.
  const float sink_weight = kSinks && sink != negative_infinity() ? expf(sink - row_max) : 0.f;
  const float sum = block_reduce<Element>(local_sum, false, scratch) + sink_weight;

  u16* o = static_cast<u16*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride +
           row * p.o_row_stride;
  for (int d = threadIdx.x; d < kHeadDimV; d += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < p.seqlen_k; ++j) {
      if (scores[j] != 0.f) acc += scores[j] * to_float<Element>(v[j * p.v_row_stride + d]);
    }
    const float out = sum > 0.f ? acc / sum : 0.f;
    o[d] = static_cast<u16>(pack2<Element>(out, 0.f) & 0xffffu);
  }
  if (kLse && threadIdx.x == 0) {
    p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + row] =
        sum > 0.f ? row_max + logf(sum) : negative_infinity();
  }
}

}  // namespace attnjit
