// The backward's GQA reduction, one warp per key row (row_kernels.cuh): dK, dV of a K/V head =
// the sum over its query heads' fp32 partials, or the conversion of the sums the main kernel
// added up.
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/common/row_kernels.cuh"

namespace attnjit {

/// The body of a generated GQA reduction kernel. kSummed: the main kernel added every query
/// head's dK and dV into fp32 sums per K/V head (dk_partial/dv_partial [B, Hkv, Sk, D]): they
/// are only converted.
template <class Element, int kHeadDim, bool kSummed = false>
__device__ __forceinline__ void backward_reduce_dkdv(const BwdParams& p) {
  const auto [key, lane, kv_head, batch] = warp_row();
  if (key >= p.seqlen_k) return;
  const int group = kSummed ? 1 : p.heads / p.kv_heads;
  const int heads = kSummed ? p.kv_heads : p.heads;
  u16* d_k = static_cast<u16*>(p.d_k) + batch * p.dk_batch_stride + key * p.dk_row_stride +
             kv_head * p.dk_head_stride;
  u16* d_v = static_cast<u16*>(p.d_v) + batch * p.dv_batch_stride + key * p.dv_row_stride +
             kv_head * p.dv_head_stride;
#pragma unroll
  for (int d = 2 * lane; d < kHeadDim; d += 64) {
    float dk0 = 0.f, dk1 = 0.f, dv0 = 0.f, dv1 = 0.f;
    for (int g = 0; g < group; ++g) {
      const long long row =
          (static_cast<long long>(batch) * heads + kv_head * group + g) * p.seqlen_k + key;
      dk0 += p.dk_partial[row * kHeadDim + d];
      dk1 += p.dk_partial[row * kHeadDim + d + 1];
      dv0 += p.dv_partial[row * kHeadDim + d];
      dv1 += p.dv_partial[row * kHeadDim + d + 1];
    }
    *reinterpret_cast<u32*>(d_k + d) = pack2<Element>(dk0, dk1);
    *reinterpret_cast<u32*>(d_v + d) = pack2<Element>(dv0, dv1);
  }
}

}  // namespace attnjit
