// The backward's GQA reduction, one warp per key row (row_kernels.cuh): dK, dV of a K/V head =
// the sum over its query heads' fp32 partials, or the conversion of the sums the main kernel
// added up.
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/common/row_kernels.cuh"

namespace attnjit {

/// out[d] = the sum over `group` fp32 rows of kHeadDim columns, the first at row `row0` of
/// `partial`, the others seqlen_k rows apart (the group's query heads); two columns per lane.
template <class Element, int kHeadDim>
__device__ __forceinline__ void sum_key_row(const float* partial, long long row0, int group,
                                            int seqlen_k, int lane, u16* out) {
#pragma unroll
  for (int d = 2 * lane; d < kHeadDim; d += 64) {
    float x0 = 0.f, x1 = 0.f;
    for (int g = 0; g < group; ++g) {
      const float* row = partial + (row0 + static_cast<long long>(g) * seqlen_k) * kHeadDim;
      x0 += row[d];
      x1 += row[d + 1];
    }
    *reinterpret_cast<u32*>(out + d) = pack2<Element>(x0, x1);
  }
}

/// The body of a generated GQA reduction kernel: dK has kHeadDimQK columns, dV kHeadDimV.
/// kSummed: the main kernel added every query head's dK and dV into fp32 sums per K/V head
/// (dk_partial/dv_partial [B, Hkv, Sk, Dqk / Dv]): they are only converted.
template <class Element, int kHeadDimQK, int kHeadDimV, bool kSummed = false>
__device__ __forceinline__ void backward_reduce_dkdv(const BwdParams& p) {
  const auto [key, lane, kv_head, batch] = warp_row();
  if (key >= p.seqlen_k) return;
  const int group = kSummed ? 1 : p.heads / p.kv_heads;
  const int heads = kSummed ? p.kv_heads : p.heads;
  u16* d_k = static_cast<u16*>(p.d_k) + batch * p.dk_batch_stride + key * p.dk_row_stride +
             kv_head * p.dk_head_stride;
  u16* d_v = static_cast<u16*>(p.d_v) + batch * p.dv_batch_stride + key * p.dv_row_stride +
             kv_head * p.dv_head_stride;
  const long long row0 =
      (static_cast<long long>(batch) * heads + kv_head * group) * p.seqlen_k + key;
  sum_key_row<Element, kHeadDimQK>(p.dk_partial, row0, group, p.seqlen_k, lane, d_k);
  sum_key_row<Element, kHeadDimV>(p.dv_partial, row0, group, p.seqlen_k, lane, d_v);
}

}  // namespace attnjit
