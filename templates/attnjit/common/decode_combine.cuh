// The merge of a decode launch's key splits (decode.cuh, num_splits > 1): one warp per output
// row (sequence, token, query head) reads the splits' LSEs and normalized fp32 rows and writes
//   LSE = log(sum_s e^LSE_s [+ e^sink]),  O = sum_s e^(LSE_s - LSE) O_s,
// exact in any split count; splits without a visible key have LSE -inf and weigh nothing. The
// sink logit (sinks=true) joins the sum as a term without value.
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"

namespace attnjit {

template <class Element, int kHeadDimV, bool kReturnLse, bool kSinks>
__device__ __forceinline__ void decode_combine(const FwdParams& p) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const long long rows = static_cast<long long>(p.batch) * p.seqlen_q * p.heads;
  const long long row = static_cast<long long>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int head = static_cast<int>(row % p.heads);
  const int token = static_cast<int>((row / p.heads) % p.seqlen_q);
  const int batch = static_cast<int>(row / (static_cast<long long>(p.heads) * p.seqlen_q));
  const int splits = p.kv_cache.num_splits;
  // The largest LSE over the splits (and the sink), then the sum of the weights.
  float top = kSinks ? p.sinks[head] : negative_infinity();
  for (int s = lane; s < splits; s += 32) top = fmaxf(top, p.kv_cache.lse_partial[s * rows + row]);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
  }
  const float base = top == negative_infinity() ? 0.f : top;
  float total = 0.f;
  for (int s = lane; s < splits; s += 32) total += expf(p.kv_cache.lse_partial[s * rows + row] - base);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    total += __shfl_xor_sync(0xffffffffu, total, offset);
  }
  if (kSinks) total += expf(p.sinks[head] - base);
  const float lse = total > 0.f ? base + logf(total) : negative_infinity();
  // Each lane sums columns [2 lane + 64 c, +2) over the splits.
  constexpr int kPairs = (kHeadDimV / 2 + 31) / 32;
  float x[kPairs], y[kPairs];
#pragma unroll
  for (int c = 0; c < kPairs; ++c) x[c] = y[c] = 0.f;
  for (int s = 0; s < splits; ++s) {
    const float split_lse = p.kv_cache.lse_partial[s * rows + row];
    if (split_lse == negative_infinity()) continue;
    const float weight = expf(split_lse - lse);
    const float* o = p.kv_cache.o_partial + (s * rows + row) * kHeadDimV;
#pragma unroll
    for (int c = 0; c < kPairs; ++c) {
      const int col = 2 * lane + 64 * c;
      if (kHeadDimV % 64 == 0 || col < kHeadDimV) {
        const float2 v = *reinterpret_cast<const float2*>(o + col);
        x[c] = fmaf(weight, v.x, x[c]);
        y[c] = fmaf(weight, v.y, y[c]);
      }
    }
  }
  u16* out = static_cast<u16*>(p.o) + batch * p.o_batch_stride + token * p.o_row_stride +
             head * p.o_head_stride;
#pragma unroll
  for (int c = 0; c < kPairs; ++c) {
    const int col = 2 * lane + 64 * c;
    if (kHeadDimV % 64 == 0 || col < kHeadDimV) {
      *reinterpret_cast<u32*>(out + col) = pack2<Element>(x[c], y[c]);
    }
  }
  if (kReturnLse && lane == 0) {
    p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + token] = lse;
  }
}

}  // namespace attnjit
