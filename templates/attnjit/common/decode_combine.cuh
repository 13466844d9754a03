// The merge of a decode launch's key splits (decode.cuh, num_splits > 1): one CTA of
// kCombineThreads per output row (sequence, token, query head) reads the splits' LSEs and
// normalized fp32 rows and writes
//   LSE = log(sum_s e^LSE_s [+ e^sink]),  O = sum_s e^(LSE_s - LSE) O_s,
// exact in any split count; splits without a visible key have LSE -inf and weigh nothing. The
// sink logit (sinks=true) joins the sum as a term without value.
//
// Its first warp reads every split's LSE at once (at most kMaxSplits, 8 a lane) and leaves the
// weights in shared memory; then groups of kHeadDimV / 4 threads each sum every kGroups-th
// split's row in 16-byte loads, several splits in flight per thread (the row of every split is
// written by decode.cuh, zeros where it saw no key), and the groups' sums meet in shared memory:
// at batch 1 the merge is a few rows of many splits, where a loop of dependent loads is slow.
#pragma once

#include "attnjit/common/kv_cache.cuh"
#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"

namespace attnjit {

inline constexpr int kCombineThreads = 128;  // rows_decode.cpp launches this block size
inline constexpr int kMaxSplits = 256;       // plan_launch.cpp never splits further

template <class Element, int kHeadDimV, bool kReturnLse, bool kSinks>
__device__ __forceinline__ void decode_combine(const FwdParams& p) {
  static_assert(kHeadDimV % 4 == 0 && kHeadDimV / 4 <= kCombineThreads,
                "decode_combine: head_dim_v a multiple of 4, at most 4 x kCombineThreads");
  constexpr int kLanes = kHeadDimV / 4;  // threads per split row, one float4 each
  constexpr int kGroups = kCombineThreads / kLanes;
  constexpr int kPerLane = kMaxSplits / 32;
  __shared__ float weights[kMaxSplits];
  __shared__ __align__(16) float sums[kGroups * kHeadDimV];
  __shared__ float row_lse;

  const int tid = static_cast<int>(threadIdx.x);
  const long long rows = static_cast<long long>(p.batch) * p.seqlen_q * p.heads;
  const long long row = blockIdx.x;
  const int head = static_cast<int>(row % p.heads);
  const int token = static_cast<int>((row / p.heads) % p.seqlen_q);
  const int batch = static_cast<int>(row / (static_cast<long long>(p.heads) * p.seqlen_q));
  const int splits = p.kv_cache.num_splits;
  const float* lse_partial = p.kv_cache.lse_partial + row;
  // Launched as a dependent of the decode kernel (rows_decode.cpp): its rows first.
  wait_for_prior_grids();
  const NewTokens tokens = new_tokens(p, batch);
  if (token >= tokens.count) return;  // ragged new tokens: past this sequence's

  if (tid < 32) {
    float split_lse[kPerLane];
    float top = kSinks ? p.sinks[head] : negative_infinity();
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int s = tid + 32 * i;
      split_lse[i] = s < splits ? lse_partial[s * rows] : negative_infinity();
      top = fmaxf(top, split_lse[i]);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
    }
    const float base = top == negative_infinity() ? 0.f : top;
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) total += expf(split_lse[i] - base);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      total += __shfl_xor_sync(0xffffffffu, total, offset);
    }
    if (kSinks) total += expf(p.sinks[head] - base);
    const float lse = total > 0.f ? base + logf(total) : negative_infinity();
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int s = tid + 32 * i;
      if (s < splits) {
        weights[s] = split_lse[i] == negative_infinity() ? 0.f : expf(split_lse[i] - lse);
      }
    }
    if (tid == 0) row_lse = lse;
  }
  __syncthreads();

  const int group = tid / kLanes;
  const int lane = tid % kLanes;
  if (group < kGroups) {
    const float* o = p.kv_cache.o_partial + row * kHeadDimV + 4 * lane;
    const long long split_stride = rows * kHeadDimV;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int s = group; s < splits; s += kGroups) {
      const float w = weights[s];
      const float4 v = *reinterpret_cast<const float4*>(o + s * split_stride);
      sum.x = fmaf(w, v.x, sum.x);
      sum.y = fmaf(w, v.y, sum.y);
      sum.z = fmaf(w, v.z, sum.z);
      sum.w = fmaf(w, v.w, sum.w);
    }
    *reinterpret_cast<float4*>(sums + group * kHeadDimV + 4 * lane) = sum;
  }
  __syncthreads();

  u16* out = static_cast<u16*>(p.o) + batch * p.o_batch_stride +
             (tokens.first + token) * p.o_row_stride + head * p.o_head_stride;
  for (int pair = tid; pair < kHeadDimV / 2; pair += kCombineThreads) {
    float x = 0.f, y = 0.f;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      x += sums[g * kHeadDimV + 2 * pair];
      y += sums[g * kHeadDimV + 2 * pair + 1];
    }
    *reinterpret_cast<u32*>(out + 2 * pair) = pack2<Element>(x, y);
  }
  if (kReturnLse && tid == 0) {
    p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + tokens.first + token] = row_lse;
  }
}

}  // namespace attnjit
